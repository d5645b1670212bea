package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/shareq/shareq/console/jobinfo"
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
type scheduleRow = jobinfo.Schedule

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
	out, err := jobinfo.Schedules(ctx, pool, *app)
	if err != nil {
		return err
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
			last = fmtShortTime(*r.LastFiring) + " (" + relText(-r.LastAgo) + ")"
		}
		switch {
		case r.NotRun:
			next, act = "- (the active scheduler does not run it)", "not run"
		case r.Active && r.NextFiring != nil:
			next, act = fmtShortTime(*r.NextFiring)+" ("+relText(r.NextIn)+")", "yes"
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
