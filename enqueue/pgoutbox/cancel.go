package pgoutbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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
	// CancelProduced: the relay had already produced the job. It is in
	// Kafka and the worker runs it: a cancel does not reach a produced
	// job (yet).
	CancelProduced
)

func (c CancelResult) String() string {
	switch c {
	case CancelWithdrawn:
		return "withdrawn"
	case CancelProduced:
		return "produced"
	default:
		return "unknown"
	}
}

// DB begins transactions: a *pgxpool.Pool, a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Cancel withdraws the job jobID from the outbox in a transaction of its
// own: see [CancelTx].
func Cancel(ctx context.Context, db DB, jobID string) (CancelResult, error) {
	if db == nil {
		return CancelUnknown, errors.New("pgoutbox: nil DB")
	}
	var res CancelResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = CancelTx(ctx, tx, jobID)
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
// A job that is no longer in the outbox is [CancelProduced] when the
// relay produced it within its [ProducedRetention], else
// [CancelUnknown]. A produced job is not stopped: it is in Kafka and the
// worker runs it.
func CancelTx(ctx context.Context, tx pgx.Tx, jobID string) (CancelResult, error) {
	if tx == nil {
		return CancelUnknown, errors.New("pgoutbox: nil transaction")
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
	if produced {
		return CancelProduced, nil
	}
	return CancelUnknown, nil
}
