package pgoutbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// Table is the outbox table, created by migration 0002.
const Table = "shareq_outbox"

// Channel is the LISTEN/NOTIFY channel on which a committed insert into
// [Table] wakes the relays.
const Channel = "shareq_outbox"

// MaxRecordBytes bounds the size of one job at enqueue time: key, value
// and headers. It stays below franz-go's default ProducerBatchMaxBytes
// (1,000,012) and Kafka's default max.message.bytes (1,048,588), so a
// row that was accepted can be relayed to a topic with default limits.
const MaxRecordBytes = 1_000_000

// EnqueueTx enqueues v on topic inside tx, the caller's transaction, and
// returns the job's ID. The job reaches Kafka after tx commits, and never
// when tx rolls back. Options are those of package enqueue (ID, Key,
// Header). A value that cannot be encoded and a job over [MaxRecordBytes]
// fail here and write nothing. The job is due at once: for a job for
// later, or a unique one, see [EnqueueJobTx].
func EnqueueTx(ctx context.Context, tx pgx.Tx, topic string, v any, opts ...enqueue.Option) (string, error) {
	ids, err := EnqueueManyTx(ctx, tx, enqueue.NewJob(topic, v, opts...))
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

const insertSQL = `INSERT INTO ` + Table + ` (topic, key, value, header_keys, header_values, job_id) VALUES ($1, $2, $3, $4, $5, $6)`

// EnqueueManyTx enqueues jobs inside tx and returns their IDs in the
// order of jobs. Every job is encoded and checked before any row is
// written; their rows are inserted in one round trip, in order.
func EnqueueManyTx(ctx context.Context, tx pgx.Tx, jobs ...enqueue.Job) ([]string, error) {
	if tx == nil {
		return nil, fmt.Errorf("pgoutbox: nil transaction")
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	recs := make([]*kgo.Record, len(jobs))
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		r, err := encode(j)
		if err != nil {
			return nil, err
		}
		recs[i], ids[i] = r, enqueue.RecordID(r)
	}
	if len(recs) == 1 {
		if _, err := tx.Exec(ctx, insertSQL, insertArgs(recs[0])...); err != nil {
			return nil, fmt.Errorf("pgoutbox: insert job %s: %w", ids[0], err)
		}
		return ids, nil
	}
	var b pgx.Batch
	for _, r := range recs {
		b.Queue(insertSQL, insertArgs(r)...)
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("pgoutbox: insert %d jobs: %w", len(recs), err)
	}
	return ids, nil
}

// insertArgs are the arguments of insertSQL for r.
func insertArgs(r *kgo.Record) []any {
	keys := make([]string, len(r.Headers))
	vals := make([][]byte, len(r.Headers))
	for i, h := range r.Headers {
		keys[i], vals[i] = h.Key, h.Value
		if vals[i] == nil {
			vals[i] = []byte{}
		}
	}
	return []any{r.Topic, r.Key, r.Value, keys, vals, enqueue.RecordID(r)}
}

// recordBytes is the size of r's key, value and headers.
func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
