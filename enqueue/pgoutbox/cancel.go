package pgoutbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/idempotency/pgstore"
)

// ProducedTable records the IDs of the jobs the relay produced, for
// [ProducedRetention], created by migration 0003.
const ProducedTable = "shareq_outbox_produced"

// CancelResult says what [Cancel] found.
type CancelResult int

const (
	// CancelUnknown: no job with the ID waits in the outbox, and the
	// relay has not produced one within its [ProducedRetention]. The ID
	// was never enqueued, its transaction rolled back (or has not
	// committed yet), it was cancelled already, or it was produced
	// longer ago.
	CancelUnknown CancelResult = iota
	// CancelWithdrawn: the job waited in the outbox and its row is
	// gone; it never reaches Kafka, and its unique key, if it had one,
	// is free.
	CancelWithdrawn
	// CancelProduced: the relay had already produced the job and no
	// [ClaimKey] was given, so nothing was recorded: the job is in Kafka
	// and the worker runs it. Only the idempotency claim can stop a
	// produced job; without ClaimKey, or when the worker does not claim
	// its jobs with idempotency.Middleware on idempotency/pgstore, the
	// worker cannot know of the cancel.
	CancelProduced
	// CancelStopped: the relay had already produced the job, and its
	// claim key (the [ClaimKey] given) now holds a cancel in the claim
	// table shareq_processed_jobs, once tx commits. A worker that claims
	// its jobs with idempotency.Middleware on idempotency/pgstore
	// ACCEPTs the delivered job without running its handler and reports
	// it as cancelled (worker.OutcomeCancelled,
	// shareq_jobs_total{outcome="cancelled"}). Also the result of a
	// second cancel of a stopped job.
	CancelStopped
	// CancelTooLate: the relay had already produced the job and a
	// worker had already run it: its claim key holds the claim of a run
	// that committed. Nothing was cancelled.
	CancelTooLate
)

func (c CancelResult) String() string {
	switch c {
	case CancelWithdrawn:
		return "withdrawn"
	case CancelProduced:
		return "produced"
	case CancelStopped:
		return "stopped"
	case CancelTooLate:
		return "too-late"
	default:
		return "unknown"
	}
}

// DB begins transactions: a *pgxpool.Pool, a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// A CancelOption configures [Cancel] and [CancelTx].
type CancelOption interface{ applyCancel(*cancelConfig) }

type cancelOptionFunc func(*cancelConfig)

func (f cancelOptionFunc) applyCancel(c *cancelConfig) { f(c) }

type cancelConfig struct {
	claimKey string
	errs     []error
}

// ClaimKey gives [CancelTx] the key under which the worker's
// idempotency.Middleware claims the job, so that a job the relay already
// produced is stopped ([CancelStopped]) rather than only reported
// ([CancelProduced]). With the middleware's defaults it is
// idempotency.Key(group, topic, jobID): the share group that runs the job,
// the job's topic and its ID (the shareq-job-id header, which the relay
// sets to the ID Enqueue returned). A middleware with its own KeyFunc or
// KeyPrefix claims another key: give that one. The cancel is written into
// pgstore's default claim table, shareq_processed_jobs (migration 0004).
func ClaimKey(key string) CancelOption {
	return cancelOptionFunc(func(c *cancelConfig) {
		if key == "" {
			c.errs = append(c.errs, errors.New("ClaimKey: empty key"))
			return
		}
		c.claimKey = key
	})
}

// Cancel withdraws the job jobID from the outbox, or stops it once
// produced, in a transaction of its own: see [CancelTx].
func Cancel(ctx context.Context, db DB, jobID string, opts ...CancelOption) (CancelResult, error) {
	if db == nil {
		return CancelUnknown, errors.New("pgoutbox: nil DB")
	}
	var res CancelResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = CancelTx(ctx, tx, jobID, opts...)
		return err
	})
	return res, err
}

// CancelTx withdraws the job jobID inside tx: when it waits in the
// outbox (due or not), its row is deleted, with its unique key, and the
// result is [CancelWithdrawn] once tx commits. A row that a relay is
// producing at that moment is locked: CancelTx waits for that relay's
// round, and then finds the job produced ([CancelProduced]) or, when the
// produce failed, withdraws it. Every row with the ID goes (an ID reused
// with enqueue.ID can have several).
//
// A job that is no longer in the outbox and that the relay produced
// within its [ProducedRetention] is in Kafka. Without [ClaimKey] it is
// [CancelProduced]: the worker runs it. With ClaimKey, CancelTx inserts
// the job's claim key marked cancelled into the claim table of
// idempotency/pgstore, and the worker's idempotency.Middleware, which
// claims the key in the job's transaction, ACCEPTs the job without running
// its handler: [CancelStopped]. When a run already claimed the key the
// result is [CancelTooLate]. A run in progress holds its claim
// uncommitted: the insert waits for its transaction, and the result is
// CancelTooLate when the run commits, CancelStopped when it fails (its
// retry then finds the cancel). Either way the job runs at most once, and
// it ran exactly when the result is CancelTooLate. tx must be READ
// COMMITTED (Postgres's default), so that it sees the run that its insert
// waited for. A worker without idempotency.Middleware on pgstore never
// reads the claim table and runs a stopped job anyway.
//
// A job neither in the outbox nor produced within ProducedRetention is
// [CancelUnknown], with or without ClaimKey: nothing is recorded.
func CancelTx(ctx context.Context, tx pgx.Tx, jobID string, opts ...CancelOption) (CancelResult, error) {
	var c cancelConfig
	for _, o := range opts {
		if o != nil {
			o.applyCancel(&c)
		}
	}
	if tx == nil {
		c.errs = append([]error{errors.New("nil transaction")}, c.errs...)
	}
	if len(c.errs) > 0 {
		for i, e := range c.errs {
			c.errs[i] = fmt.Errorf("pgoutbox: %w", e)
		}
		return CancelUnknown, errors.Join(c.errs...)
	}
	var n int64
	err := tx.QueryRow(ctx, `WITH d AS (DELETE FROM `+Table+` WHERE job_id = $1 RETURNING unique_key),
		u AS (DELETE FROM `+UniqueTable+` k USING d WHERE k.key = d.unique_key AND k.job_id = $1)
		SELECT count(*) FROM d`, jobID).Scan(&n)
	if err != nil {
		return CancelUnknown, fmt.Errorf("pgoutbox: cancel job %s: %w", jobID, err)
	}
	if n > 0 {
		return CancelWithdrawn, nil
	}
	var produced bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+ProducedTable+` WHERE job_id = $1)`, jobID).Scan(&produced); err != nil {
		return CancelUnknown, fmt.Errorf("pgoutbox: cancel job %s: %w", jobID, err)
	}
	switch {
	case !produced:
		return CancelUnknown, nil
	case c.claimKey == "":
		return CancelProduced, nil
	}
	return stopProduced(ctx, tx, jobID, c.claimKey)
}

// claimTable is where the worker's claims are, and where a cancel of a
// produced job goes.
var claimTable = pgx.Identifier{pgstore.TableDefault}.Sanitize()

// stopProduced writes key marked cancelled into the claim table, unless a
// run claimed it; the primary key orders a cancel and a run's claim.
func stopProduced(ctx context.Context, tx pgx.Tx, jobID, key string) (CancelResult, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO `+claimTable+` (key, cancelled_at) VALUES ($1, now()) ON CONFLICT (key) DO NOTHING`, key)
	if err != nil {
		return CancelUnknown, fmt.Errorf("pgoutbox: cancel job %s: claim key %q: %w", jobID, key, err)
	}
	if tag.RowsAffected() == 1 {
		return CancelStopped, nil
	}
	// Taken, by a committed run or cancel: the insert waited for it, and
	// this statement sees it.
	var cancelled bool
	err = tx.QueryRow(ctx, `SELECT cancelled_at IS NOT NULL FROM `+claimTable+` WHERE key = $1`, key).Scan(&cancelled)
	if err != nil {
		// pgx.ErrNoRows: tx does not see the row its insert conflicted
		// with (not READ COMMITTED), or a sweep deleted it just now.
		return CancelUnknown, fmt.Errorf("pgoutbox: cancel job %s: claim key %q taken, but its row cannot be read: %w", jobID, key, err)
	}
	if cancelled {
		return CancelStopped, nil
	}
	return CancelTooLate, nil
}
