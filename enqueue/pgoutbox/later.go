package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// UniqueTable holds the unique keys of jobs enqueued with [Unique] or
// [UniqueFor], created by migration 0003.
const UniqueTable = "shareq_outbox_unique"

// An Option holds a job in the outbox: until it is due ([At], [In]), or
// as the only one of its unique key ([Unique], [UniqueFor]). Options are
// for [EnqueueJobTx]; the job's own properties (ID, key, headers) are the
// options of package enqueue, in its [enqueue.Job].
//
// They are pgoutbox's own type, not [enqueue.Option]: a job enqueued
// without Postgres (enqueue.Client) cannot ask for them, and a program
// that tries does not compile, rather than enqueueing an immediate job.
type Option interface{ applyOutbox(*outboxOpts) }

type outboxOptionFunc func(*outboxOpts)

func (f outboxOptionFunc) applyOutbox(o *outboxOpts) { f(o) }

type outboxOpts struct {
	at        time.Time     // due time, when set
	in        time.Duration // due after this delay, when at is zero and hasIn
	hasIn     bool
	unique    string
	uniqueFor time.Duration
	err       error
}

// At makes the job due at t: its row waits in the outbox until then, and
// the relay produces it when t has passed (by Postgres's clock). A t in
// the past is due at once, and takes its place in due order before jobs
// due later, also those of its key that were enqueued before it and
// still wait. Of At and [In], the last given wins.
func At(t time.Time) Option {
	return outboxOptionFunc(func(o *outboxOpts) {
		if t.IsZero() {
			o.err = errors.New("At: zero time")
		}
		o.at, o.hasIn = t, false
	})
}

// In makes the job due d after its insert, by Postgres's clock
// (clock_timestamp() + d, so a clock difference between the program and
// the database does not move it). d <= 0 is due at once. Of [At] and In,
// the last given wins.
func In(d time.Duration) Option {
	return outboxOptionFunc(func(o *outboxOpts) { o.at, o.in, o.hasIn = time.Time{}, d, true })
}

// Unique makes the job unique by key while a job with that key waits in
// the outbox: enqueueing another one then writes nothing and returns the
// waiting job's ID with [Result.Duplicate] set. Once the relay produced
// the job (or it was cancelled) the key is free again. Keys are global to
// the outbox: include the topic or the job's kind in them. Of Unique and
// [UniqueFor], the last given wins.
func Unique(key string) Option { return UniqueFor(key, 0) }

// UniqueFor is [Unique], and keeps the key for d after the relay
// produced the job: an enqueue with the key within d of the produce is a
// duplicate of the produced job.
func UniqueFor(key string, d time.Duration) Option {
	return outboxOptionFunc(func(o *outboxOpts) {
		switch {
		case key == "":
			o.err = errors.New("Unique: empty key")
		case d < 0:
			o.err = fmt.Errorf("UniqueFor(%q, %v): negative period", key, d)
		}
		o.unique, o.uniqueFor = key, d
	})
}

// Result is the outcome of [EnqueueJobTx].
type Result struct {
	// ID is the job's ID: the new job's, or, for a duplicate, that of the
	// job that holds the unique key.
	ID string
	// Duplicate is true when the job's unique key was held by another
	// job, so that nothing was written.
	Duplicate bool
}

const insertLaterSQL = `INSERT INTO ` + Table + `
	(topic, key, value, header_keys, header_values, job_id, due_at, next_attempt_at, unique_key)
SELECT $1, $2, $3, $4, $5, $6, s.due, s.due, $9
FROM (SELECT coalesce($7::timestamptz, clock_timestamp() + $8::bigint * interval '1 microsecond') AS due) s`

// EnqueueJobTx enqueues job inside tx, the caller's transaction, held in
// the outbox as opts say: until it is due ([At], [In]), and as the only
// job of its unique key ([Unique], [UniqueFor]). Without opts it is
// [EnqueueTx]. The job's ID, key and headers are those of job
// (enqueue.NewJob with enqueue.ID, enqueue.Key, enqueue.Header).
//
// A duplicate of a unique key is no error: the Result says so and
// carries the ID of the job that holds the key, and nothing is written.
// The database decides, through the primary key of [UniqueTable]: of
// concurrent transactions enqueueing one key, the first to insert it
// holds it, and the others wait for that transaction to end; when it
// commits they are duplicates of its job, when it rolls back one of them
// holds the key. (In a REPEATABLE READ or SERIALIZABLE transaction, that
// wait ends in a serialization failure instead, SQLSTATE 40001: retry
// the transaction, as for any such failure.)
func EnqueueJobTx(ctx context.Context, tx pgx.Tx, job enqueue.Job, opts ...Option) (Result, error) {
	if tx == nil {
		return Result{}, fmt.Errorf("pgoutbox: nil transaction")
	}
	var o outboxOpts
	for _, opt := range opts {
		if opt != nil {
			opt.applyOutbox(&o)
		}
	}
	if o.err != nil {
		return Result{}, fmt.Errorf("pgoutbox: %w", o.err)
	}
	r, err := encode(job)
	if err != nil {
		return Result{}, err
	}
	id := enqueue.RecordID(r)
	if o.unique != "" {
		holder, dup, err := claimUnique(ctx, tx, o.unique, id, o.uniqueFor)
		if err != nil {
			return Result{}, err
		}
		if dup {
			return Result{ID: holder, Duplicate: true}, nil
		}
	}
	if o.at.IsZero() && !o.hasIn && o.unique == "" {
		if _, err := tx.Exec(ctx, insertSQL, insertArgs(r)...); err != nil {
			return Result{}, fmt.Errorf("pgoutbox: insert job %s: %w", id, err)
		}
		return Result{ID: id}, nil
	}
	var at *time.Time
	if !o.at.IsZero() {
		at = &o.at
	}
	var uniqueKey *string
	if o.unique != "" {
		uniqueKey = &o.unique
	}
	args := append(insertArgs(r), at, o.in.Microseconds(), uniqueKey)
	if _, err := tx.Exec(ctx, insertLaterSQL, args...); err != nil {
		return Result{}, fmt.Errorf("pgoutbox: insert job %s: %w", id, err)
	}
	return Result{ID: id}, nil
}

// uniqueAttempts bounds the rounds of claimUnique, each of which lost a
// race (an expired key taken over, or swept, by another transaction).
const uniqueAttempts = 5

// claimUnique makes jobID the holder of key in tx, or returns the
// holder's job ID and true when another job holds it. An expired key
// (its job produced more than its period ago) is taken over.
func claimUnique(ctx context.Context, tx pgx.Tx, key, jobID string, period time.Duration) (holder string, dup bool, err error) {
	for range uniqueAttempts {
		// Waits for a transaction that inserted key and has not ended.
		tag, err := tx.Exec(ctx, `INSERT INTO `+UniqueTable+` (key, job_id, unique_for)
			VALUES ($1, $2, $3::bigint * interval '1 microsecond') ON CONFLICT (key) DO NOTHING`, key, jobID, period.Microseconds())
		if err != nil {
			return "", false, fmt.Errorf("pgoutbox: unique key %q: %w", key, err)
		}
		if tag.RowsAffected() == 1 {
			return jobID, false, nil
		}
		var expired bool
		err = tx.QueryRow(ctx, `SELECT job_id, coalesce(expires_at <= clock_timestamp(), false) FROM `+UniqueTable+` WHERE key = $1`, key).Scan(&holder, &expired)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // swept since the insert: try again
		}
		if err != nil {
			return "", false, fmt.Errorf("pgoutbox: unique key %q: %w", key, err)
		}
		if !expired {
			return holder, true, nil
		}
		tag, err = tx.Exec(ctx, `UPDATE `+UniqueTable+` SET job_id = $2, unique_for = $3::bigint * interval '1 microsecond', expires_at = NULL
			WHERE key = $1 AND expires_at <= clock_timestamp()`, key, jobID, period.Microseconds())
		if err != nil {
			return "", false, fmt.Errorf("pgoutbox: unique key %q: %w", key, err)
		}
		if tag.RowsAffected() == 1 {
			return jobID, false, nil
		}
	}
	return "", false, fmt.Errorf("pgoutbox: unique key %q: lost %d races for it to other transactions", key, uniqueAttempts)
}

// encode encodes job as a row of the outbox accepts it.
func encode(j enqueue.Job) (*kgo.Record, error) {
	r, err := j.Record()
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: %w", err)
	}
	if n := recordBytes(r); n > MaxRecordBytes {
		return nil, fmt.Errorf("pgoutbox: job %s on %s is %d bytes, over %d: %w", enqueue.RecordID(r), r.Topic, n, MaxRecordBytes, enqueue.ErrTooLarge)
	}
	return r, nil
}
