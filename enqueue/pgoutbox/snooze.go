package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// SnoozeKeyPeriod is how long the key of a snoozed job's copy stays held
// after the relay produced the copy (its [UniqueFor] period): a worker
// that wrote a copy and died before it accepted the original gets the
// original redelivered within a lock duration or two (30 s by default,
// at most an hour with share.record.lock.duration.ms at its maximum),
// and its second copy of that record is then refused, whether the first
// still waits in the outbox or was relayed already. Keys are deleted by
// the relay's sweep once the period is over.
const SnoozeKeyPeriod = time.Hour

// snoozeKeyPrefix keeps the copies' keys apart from the unique keys of
// jobs enqueued with [Unique], which share [UniqueTable].
const snoozeKeyPrefix = "shareq-snooze:"

// SnoozeStore keeps the copies of snoozed jobs in the outbox until they
// are due, for the relay to produce: it is the worker's Snoozer (give it
// to worker.SnoozeVia). Make one with [Snoozer]. It is safe for
// concurrent use.
type SnoozeStore struct {
	db DB
}

// Snoozer returns the store that keeps the copies of a worker's snoozed
// jobs in the outbox, through db (a *pgxpool.Pool), for a [Relay] to
// produce when they are due:
//
//	w, err := worker.New(..., worker.SnoozeVia(pgoutbox.Snoozer(pool)))
//
// With the worker's idempotency.Middleware on idempotency/pgstore, a job
// snoozed any number of times then runs exactly once: see
// [SnoozeStore.Snooze]. The outbox tables come from migrations 0002 and
// 0003 (migrations.Up), and a relay must run against them. It panics on
// a nil db, as a program that passes one cannot work.
func Snoozer(db DB) *SnoozeStore {
	if db == nil {
		panic("pgoutbox: Snoozer: nil DB")
	}
	return &SnoozeStore{db: db}
}

// Check returns an error, saying to run the migrations, when the outbox
// tables cannot be read through the store's db (missing, or Postgres
// unreachable). The worker calls it at start and warns with its error:
// the copies then go to their topics until the outbox works.
func (s *SnoozeStore) Check(ctx context.Context) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgoutbox: Snoozer: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, t := range []string{Table, UniqueTable} {
		if _, err := tx.Exec(ctx, "SELECT 1 FROM "+t+" LIMIT 0"); err != nil {
			return fmt.Errorf("pgoutbox: Snoozer: the outbox table %s is not readable (run migrations.Up): %w", t, err)
		}
	}
	return nil
}

// Snooze stores rec, the copy of a snoozed job, in the outbox in a
// transaction of its own, due at due (a due time already past makes it
// due at once). The relay produces it as it is: its topic, key, value
// and headers in their order, the job ID header (shareq-job-id) with
// them; the partition is the producer's choice (the record key's, for a
// keyed job), and a header with a nil value arrives with an empty one.
// rec must carry a job ID, which the copy's run claims: with
// idempotency.Middleware each copy of a job claims the key its earlier
// runs rolled back, so the job's effect commits once.
//
// key names the copy (the worker's is "jobID@topic/partition/offset" of
// the record copied). The first Snooze of a key holds it, in
// [UniqueTable], while the copy waits and for [SnoozeKeyPeriod] after
// the relay produced it; a Snooze with a held key stores nothing and
// returns nil. Of concurrent Snoozes of one key, one stores its copy.
//
// An error stores nothing: an outbox without its tables says to run the
// migrations, and an unreachable Postgres returns the driver's error
// (the worker then releases the original, which spends a delivery).
func (s *SnoozeStore) Snooze(ctx context.Context, rec *kgo.Record, due time.Time, key string) error {
	if err := checkSnooze(rec, due, key); err != nil {
		return err
	}
	id := enqueue.RecordID(rec)
	ukey := snoozeKeyPrefix + key
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		_, dup, err := claimUnique(ctx, tx, ukey, id, SnoozeKeyPeriod)
		if err != nil || dup {
			return err
		}
		_, err = tx.Exec(ctx, insertLaterSQL, append(insertArgs(rec), due, int64(0), ukey)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgoutbox: store the copy of snoozed job %s (key %q): %w", id, key, explainSnooze(err))
	}
	return nil
}

// checkSnooze returns why rec, due and key cannot be stored, if they
// cannot.
func checkSnooze(rec *kgo.Record, due time.Time, key string) error {
	switch {
	case rec == nil:
		return errors.New("pgoutbox: Snooze: nil record")
	case rec.Topic == "":
		return errors.New("pgoutbox: Snooze: record has no topic")
	case enqueue.RecordID(rec) == "":
		return errors.New("pgoutbox: Snooze: record has no shareq-job-id header: the copy's run could not claim the job")
	case key == "":
		return errors.New("pgoutbox: Snooze: empty key")
	case due.IsZero():
		return errors.New("pgoutbox: Snooze: zero due time")
	}
	if n := recordBytes(rec); n > MaxRecordBytes {
		return fmt.Errorf("pgoutbox: Snooze: job %s on %s is %d bytes, over %d: %w", enqueue.RecordID(rec), rec.Topic, n, MaxRecordBytes, enqueue.ErrTooLarge)
	}
	return nil
}

// explainSnooze says to run the migrations when err is Postgres's
// missing table or column.
func explainSnooze(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") {
		return fmt.Errorf("the outbox tables %s and %s are missing or old: apply migrations (migrations.Up): %w", Table, UniqueTable, err)
	}
	return err
}
