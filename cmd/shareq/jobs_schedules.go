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
none is coming. ACTIVE "not run" is a schedule that the active scheduler
does not run (removed or renamed: its row was last written by another
leader than the app's latest rows); it keeps its row, as last recorded,
until deleted by hand.
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
	Active     bool       `json:"active"`  // the app has an active scheduler
	NotRun     bool       `json:"not_run"` // which does not run this schedule (removed, renamed)

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
	// The app's current leader is the one that wrote its latest row: the
	// active scheduler writes all of its schedules' rows when it takes
	// over. A row another leader wrote last is of a schedule the active
	// one does not run.
	active := map[string]bool{}
	current := map[string]*scheduleRow{}
	for i := range out {
		r := &out[i]
		if c := current[r.App]; c == nil || r.UpdatedAt.After(c.UpdatedAt) {
			current[r.App] = r
		}
	}
	for i := range out {
		r := &out[i]
		if _, ok := active[r.App]; !ok {
			if active[r.App], err = schedulerActive(ctx, pool, r.App); err != nil {
				return err
			}
		}
		r.Active = active[r.App]
		r.NotRun = r.Active && strOr(r.Leader, "") != strOr(current[r.App].Leader, "")
		if !r.Active || r.NotRun {
			r.NextFiring = nil
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
		case r.NotRun:
			next, act = "- (the active scheduler does not run it)", "not run"
		case r.Active && r.NextFiring != nil:
			next, act = fmtShortTime(*r.NextFiring)+" ("+relText(r.nextIn)+")", "yes"
		case r.Active:
			next, act = "none (the spec has no more firings)", "yes"
		default:
			next = "- (no active scheduler)"
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
