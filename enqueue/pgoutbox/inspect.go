package pgoutbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier runs queries: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ReadBacklog reads the outbox table's backlog (one aggregate query), as
// [Relay.Backlog] does, without a relay: for a tool that watches the
// outbox, such as the console.
func ReadBacklog(ctx context.Context, q Querier) (Backlog, error) {
	var b Backlog
	var age float64
	err := q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE due_at > now()), count(*) FILTER (WHERE attempts > 0),
		coalesce(extract(epoch FROM now() - min(greatest(due_at, created_at)) FILTER (WHERE due_at <= now())), 0)::float8
		FROM `+Table).Scan(&b.Rows, &b.Scheduled, &b.Failing, &age)
	if err != nil {
		return Backlog{}, fmt.Errorf("pgoutbox: backlog: %w", err)
	}
	b.OldestAge = max(0, time.Duration(age*float64(time.Second)))
	return b, nil
}

// FailingRow is a row of the outbox the relay failed to produce at least
// once: it stays in the table, and the relay tries it again at
// NextAttemptAt.
type FailingRow struct {
	ID            int64
	Topic         string
	JobID         string
	Attempts      int
	LastError     string
	CreatedAt     time.Time
	NextAttemptAt time.Time
}

// Failing returns up to limit of the outbox's failing rows, those failing
// longest first.
func Failing(ctx context.Context, q Querier, limit int) ([]FailingRow, error) {
	rows, err := q.Query(ctx, `SELECT id, topic, job_id, attempts, coalesce(last_error, ''), created_at, next_attempt_at
		FROM `+Table+` WHERE attempts > 0 ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: failing rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailingRow, error) {
		var f FailingRow
		err := r.Scan(&f.ID, &f.Topic, &f.JobID, &f.Attempts, &f.LastError, &f.CreatedAt, &f.NextAttemptAt)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: failing rows: %w", err)
	}
	return out, nil
}
