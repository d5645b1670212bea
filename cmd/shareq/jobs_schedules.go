package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/scheduler"
)

const jobsSchedulesUsage = `usage: shareq jobs schedules [flags]

Lists the periodic schedules that the schedulers (package scheduler) have
recorded in the state table, by app and name: the spec, the last firing
enqueued, and the next one with the process that leads.

The active scheduler of an app records every schedule when it takes over
and again with each firing (migration 0006). Whether an app has one now is
read from Postgres's locks (the scheduler's advisory lock, in pg_locks):
ACTIVE yes means some process holds it, and NEXT FIRING and LEADER are
what it recorded. ACTIVE no means no scheduler of the app runs: nothing
fires, LEADER is the last one, and the next firing is not shown since
none is coming. A schedule the app no longer runs keeps its row, as last
recorded.
`

// scheduleRow is one row of the scheduler's state table.
type scheduleRow struct {
	App        string     `json:"app"`
	Schedule   string     `json:"schedule"`
	Spec       *string    `json:"spec"`
	LastFiring *time.Time `json:"last_firing"`
	NextFiring *time.Time `json:"next_firing"`
	Leader     *string    `json:"leader"`
	UpdatedAt  time.Time  `json:"updated_at"`
	Active     bool       `json:"active"`

	lastAgo, nextIn time.Duration
}

func jobsSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobsFlags("schedules", jobsSchedulesUsage, stderr)
	app := f.fs.String("app", "", "only this app's schedules (scheduler.App)")
	asJSON := f.fs.Bool("json", false, "print a JSON array instead of a table")
	if _, err := f.parse(args, 0); err != nil {
		return err
	}
	pool, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := `SELECT app, schedule, spec, last_firing, next_firing, leader, updated_at,
		coalesce(extract(epoch FROM now() - last_firing), 0)::float8, coalesce(extract(epoch FROM next_firing - now()), 0)::float8
		FROM ` + scheduler.StateTable + ` WHERE $1 = '' OR app = $1 ORDER BY app, schedule`
	rs, err := pool.Query(ctx, q, *app)
	if err != nil {
		return tableHint(fmt.Errorf("read the schedules: %w", err))
	}
	var out []scheduleRow
	var r scheduleRow
	var lastAgo, nextIn float64
	_, err = pgx.ForEachRow(rs, []any{&r.App, &r.Schedule, &r.Spec, &r.LastFiring, &r.NextFiring, &r.Leader, &r.UpdatedAt, &lastAgo, &nextIn}, func() error {
		r.lastAgo, r.nextIn = seconds(lastAgo), seconds(nextIn)
		out = append(out, r)
		r = scheduleRow{}
		return nil
	})
	if err != nil {
		return tableHint(fmt.Errorf("read the schedules: %w", err))
	}
	active := map[string]bool{}
	for i := range out {
		a := out[i].App
		if _, ok := active[a]; !ok {
			if active[a], err = schedulerActive(ctx, pool, a); err != nil {
				return err
			}
		}
		out[i].Active = active[a]
		if !out[i].Active {
			out[i].NextFiring = nil
		}
	}
	if *asJSON {
		if out == nil {
			out = []scheduleRow{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tSCHEDULE\tSPEC\tLAST FIRING\tNEXT FIRING\tACTIVE\tLEADER")
	for i := range out {
		r := &out[i]
		last, next, act := "never", "-", "no"
		if r.LastFiring != nil {
			last = fmtShortTime(*r.LastFiring) + " (" + relText(-r.lastAgo) + ")"
		}
		switch {
		case r.Active && r.NextFiring != nil:
			next = fmtShortTime(*r.NextFiring) + " (" + relText(r.nextIn) + ")"
		case r.Active:
			next = "none (the spec has no more firings)"
		default:
			next = "- (no active scheduler)"
		}
		if r.Active {
			act = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.App, 40), cell(r.Schedule, 40), cell(strOr(r.Spec, "-"), 40), last, next, act, cell(strOr(r.Leader, "-"), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out) == 0 {
		fmt.Fprintln(stderr, "no schedules recorded (a scheduler records its schedules when it becomes its app's active one)")
	}
	return nil
}

// schedulerActive reports whether a session holds the advisory lock of
// app's active scheduler in this database.
func schedulerActive(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, app string) (bool, error) {
	k := uint64(scheduler.LockKey(app))
	var held bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1)`, int64(k>>32), int64(k&0xffffffff)).Scan(&held)
	if err != nil {
		return false, fmt.Errorf("read the scheduler's lock from pg_locks: %w", err)
	}
	return held, nil
}
