// Package jobinfo gathers what shareq's stores know of a job, by its ID:
// its rows in the outbox of enqueue/pgoutbox, whether a relay produced
// it, its idempotency claim (idempotency/pgstore), its runs in the job
// log (joblog/pgjoblog) and its records in DLQ topics (package dlq); and
// it lists the jobs waiting in the outbox and the periodic schedules of
// package scheduler. The console's job and outbox pages and the commands
// "shareq jobs show", "list" and "schedules" read through it, so that
// both say the same.
//
// Every function reads only; it needs the migrations applied (package
// migrations).
package jobinfo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/joblog/pgjoblog"
)

// DB runs the queries: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx. [Find]
// reads the job log only through a DB that is also a [pgjoblog.DB] (a
// pool is).
type DB = pgoutbox.Querier

// OutboxRow is a row of the outbox table: a job waiting for a relay to
// produce it.
type OutboxRow struct {
	// ID is the row's id; JobID the job's ID (several rows can share
	// one when an ID is reused with enqueue.ID).
	ID    int64
	JobID string
	Topic string
	// Key is the record's key, nil for none.
	Key []byte
	// Value is the record's value: [Find] fills it in, [List] leaves it
	// nil (ValueSize is always set).
	Value      []byte
	ValueSize  int
	HeaderKeys []string
	// Due is when the job is due: -infinity for a row enqueued before
	// migration 0003 (due at once).
	Due     pgtype.Timestamptz
	Created time.Time
	// Attempts counts the relay's failed produces; NextAttempt is its
	// next try, and LastError the last failure's text.
	Attempts    int
	NextAttempt time.Time
	LastError   *string
	// UniqueKey is the key of pgoutbox.Unique or UniqueFor, nil when
	// none; UniqueFor ([Find] only) is the key's period after the
	// produce, nil or 0 when none.
	UniqueKey *string
	UniqueFor *time.Duration
	// DueIn and NextAttemptIn are Due and NextAttempt less now, on
	// Postgres's clock; DueIn is 0 for -infinity.
	DueIn, NextAttemptIn time.Duration
}

// Job is what Postgres holds of one job: see [Find].
type Job struct {
	ID string
	// Outbox are the job's rows in the outbox, in due order.
	Outbox []OutboxRow
	// ProducedAt is when a relay produced the job, nil when no relay did
	// within its ProducedRetention; ProducedAgo is now less ProducedAt
	// on Postgres's clock.
	ProducedAt  *time.Time
	ProducedAgo time.Duration
	// Claim is the job's idempotency claim, read under the key Find was
	// given (ClaimUnknown without one).
	Claim Claim
	// Runs are the job log's runs of the job, newest first;
	// JobLog reports whether the job log was read (false when the
	// database has no job log, migration 0008, or DB is no pgjoblog.DB).
	Runs   []pgjoblog.Run
	JobLog bool
}

// Found reports whether Postgres holds anything of the job: an outbox
// row, a produce, a run, or a claim.
func (j *Job) Found() bool {
	return len(j.Outbox) > 0 || j.ProducedAt != nil || len(j.Runs) > 0 || j.Claim.State == ClaimRan || j.Claim.State == ClaimCancelled
}

// outboxColumns are the columns queryOutbox scans, of the outbox table
// as o.
const outboxColumns = `o.id, o.job_id, o.topic, o.key, o.header_keys, o.due_at, o.created_at, o.attempts, o.next_attempt_at,
	o.last_error, o.unique_key, octet_length(o.value),
	CASE WHEN isfinite(o.due_at) THEN extract(epoch FROM o.due_at - now()) ELSE 0 END::float8,
	extract(epoch FROM o.next_attempt_at - now())::float8`

// Find reads what Postgres holds of the job id: its outbox rows (with
// their values), its produce, its claim under claimKey ("" to not read
// it; idempotency.Key(group, topic, id) is the key of a worker's
// idempotency.Middleware with its defaults) and its runs in the job log.
// A job Postgres holds nothing of is no error: [Job.Found] says.
func Find(ctx context.Context, db DB, id, claimKey string) (Job, error) {
	j := Job{ID: id}
	var err error
	j.Outbox, err = queryOutbox(ctx, db, `SELECT `+outboxColumns+`, o.value, u.unique_for
		FROM `+pgoutbox.Table+` o LEFT JOIN `+pgoutbox.UniqueTable+` u ON u.key = o.unique_key AND u.job_id = o.job_id
		WHERE o.job_id = $1 ORDER BY o.due_at, o.id`, true, id)
	if err != nil {
		return j, TableHint(fmt.Errorf("read the outbox: %w", err))
	}
	var ago float64
	err = db.QueryRow(ctx, `SELECT produced_at, extract(epoch FROM now() - produced_at)::float8 FROM `+pgoutbox.ProducedTable+` WHERE job_id = $1`, id).Scan(&j.ProducedAt, &ago)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return j, TableHint(fmt.Errorf("read the produced jobs: %w", err))
	}
	j.ProducedAgo = seconds(ago)
	if j.Claim, err = ReadClaim(ctx, db, claimKey); err != nil {
		return j, err
	}
	j.Runs, j.JobLog, err = runs(ctx, db, id)
	return j, err
}

// runs reads the job log's runs of job id, newest first; not read, and no
// error, when the database has no job log (migration 0008 not applied)
// or db cannot serve pgjoblog.
func runs(ctx context.Context, db DB, id string) ([]pgjoblog.Run, bool, error) {
	jdb, ok := db.(pgjoblog.DB)
	if !ok {
		return nil, false, nil
	}
	l, err := pgjoblog.New(jdb)
	if err != nil {
		return nil, false, err
	}
	rs, err := l.Runs(ctx, id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the job log: %w", err)
	}
	return rs, true, nil
}

// queryOutbox runs q, which selects outboxColumns (and the value and the
// unique key's period when withValue).
func queryOutbox(ctx context.Context, db DB, q string, withValue bool, args ...any) ([]OutboxRow, error) {
	rs, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []OutboxRow
	var r OutboxRow
	var dueIn, nextIn float64
	dest := []any{&r.ID, &r.JobID, &r.Topic, &r.Key, &r.HeaderKeys, &r.Due, &r.Created, &r.Attempts, &r.NextAttempt, &r.LastError, &r.UniqueKey, &r.ValueSize, &dueIn, &nextIn}
	if withValue {
		dest = append(dest, &r.Value, &r.UniqueFor)
	}
	_, err = pgx.ForEachRow(rs, dest, func() error {
		r.DueIn = seconds(dueIn)
		r.NextAttemptIn = seconds(nextIn)
		out = append(out, r)
		r = OutboxRow{}
		return nil
	})
	return out, err
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// TableHint adds advice to an error about a missing table or column: the
// migrations are likely not applied.
func TableHint(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42703") {
		return fmt.Errorf("%w (is this shareq's database, and are its migrations applied? migrations.Up creates the tables)", err)
	}
	return err
}
