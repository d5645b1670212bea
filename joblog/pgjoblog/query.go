package pgjoblog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/handler"
)

// MaxRecent bounds the runs one call of [Log.Recent] or [Log.Runs]
// returns.
const MaxRecent = 1000

// Filter selects runs for [Log.Recent]; its zero value selects all.
type Filter struct {
	// Topic, when set, keeps the runs of that topic.
	Topic string
	// Outcome, when set, keeps the runs of that outcome ("retried",
	// "parked"...: worker.Outcome's names).
	Outcome string
	// Since, when set, keeps the runs that ended at or after it.
	Since time.Time
	// Limit is the most runs returned: default 100, at most MaxRecent.
	Limit int
}

const selectRuns = `SELECT job_id, topic, partition, "offset", delivery_count, outcome, ack,
    started_at, ended_at, duration_us, error, worker, trace_id, result, progress, progress_msg FROM ` + table

// Runs returns the runs of the job with ID jobID (handler.Job.ID), newest
// first, at most MaxRecent; none when the job log has none (never
// written, or past the retention).
func (l *Log) Runs(ctx context.Context, jobID string) ([]Run, error) {
	return l.query(ctx, selectRuns+" WHERE job_id = $1 ORDER BY ended_at DESC, delivery_count DESC LIMIT $2", jobID, MaxRecent)
}

// Recent returns the latest runs that f selects, newest first.
func (l *Log) Recent(ctx context.Context, f Filter) ([]Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxRecent)
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Topic != "" {
		add("topic = $%d", f.Topic)
	}
	if f.Outcome != "" {
		add("outcome = $%d", f.Outcome)
	}
	if !f.Since.IsZero() {
		add("ended_at >= $%d", f.Since)
	}
	sql := selectRuns
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	sql += fmt.Sprintf(" ORDER BY ended_at DESC LIMIT $%d", len(args))
	return l.query(ctx, sql, args...)
}

func (l *Log) query(ctx context.Context, sql string, args ...any) ([]Run, error) {
	rows, err := l.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgjoblog: read %s: %w", table, err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var r Run
		var us int64
		var result []byte
		var pct *int
		var msg string
		err := row.Scan(&r.JobID, &r.Topic, &r.Partition, &r.Offset, &r.DeliveryCount, &r.Outcome, &r.Ack,
			&r.Started, &r.Ended, &us, &r.Error, &r.Worker, &r.TraceID, &result, &pct, &msg)
		r.Duration = time.Duration(us) * time.Microsecond
		if result != nil {
			r.Result = result
		}
		if pct != nil {
			r.Progress = &handler.Progress{Percent: *pct, Message: msg}
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgjoblog: read %s: %w (apply migrations.Up if the table is missing)", table, err)
	}
	return runs, nil
}
