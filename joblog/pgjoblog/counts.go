package pgjoblog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier is what [CountOutcomes] reads through: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// MaxCountSteps bounds the steps of one [CountOutcomes] call.
const MaxCountSteps = 10_000

// OutcomeCount is the number of runs of one outcome that ended within one
// step.
type OutcomeCount struct {
	// Start is the step's start: runs that ended at or after it, and
	// before Start plus the step.
	Start time.Time
	// Outcome is worker.Outcome's name: succeeded, retried, parked...
	Outcome string
	// Runs is the number of runs.
	Runs int64
}

const countSQL = `SELECT date_bin(make_interval(secs => $4), ended_at, $2) AS start, outcome, count(*)
FROM ` + table + `
WHERE topic = $1 AND ended_at >= $2 AND ended_at < $3
GROUP BY 1, 2` // a hash aggregate; sorted in Go (a day's rows sorted in SQL spilled to disk)

// CountOutcomes counts the runs of topic that ended from from (included)
// to to (excluded) per outcome, in steps of step starting at from: one
// query, for charts such as the console's. Steps and outcomes without a
// run are left out; the counts are sorted by step, then outcome. The
// steps are whole seconds, at most [MaxCountSteps] of them.
//
// It reads the index of migration 0009 (topic, ended_at, with the
// outcome), in the partitions of the days the range covers only.
func CountOutcomes(ctx context.Context, q Querier, topic string, from, to time.Time, step time.Duration) ([]OutcomeCount, error) {
	switch {
	case step < time.Second || step%time.Second != 0:
		return nil, fmt.Errorf("pgjoblog: count outcomes: step %v; give whole seconds, 1s or more", step)
	case !from.Before(to):
		return nil, fmt.Errorf("pgjoblog: count outcomes: from %v is not before to %v; give a range that ends after it starts", from, to)
	case to.Sub(from)/step > MaxCountSteps:
		return nil, fmt.Errorf("pgjoblog: count outcomes: %v in steps of %v is over %d steps; give a longer step", to.Sub(from), step, MaxCountSteps)
	}
	rows, err := q.Query(ctx, countSQL, topic, from, to, step.Seconds())
	if err != nil {
		return nil, countError(err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutcomeCount, error) {
		var c OutcomeCount
		err := row.Scan(&c.Start, &c.Outcome, &c.Runs)
		return c, err
	})
	if err != nil {
		return nil, countError(err)
	}
	slices.SortFunc(counts, func(a, b OutcomeCount) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.Outcome, b.Outcome))
	})
	return counts, nil
}

func countError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pgjoblog: count outcomes in %s: %w", table, err)
	}
	return fmt.Errorf("pgjoblog: count outcomes in %s: %w (apply migrations.Up if the table is missing)", table, err)
}
