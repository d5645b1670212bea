package jobinfo

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/scheduler"
)

// Schedule is a periodic schedule as the schedulers of package scheduler
// record it in their state table (migration 0006).
type Schedule struct {
	App        string     `json:"app"`
	Schedule   string     `json:"schedule"`
	Spec       *string    `json:"spec"`
	LastFiring *time.Time `json:"last_firing"`
	// NextFiring is the next firing the active scheduler recorded; nil
	// when the app has no active scheduler, or it does not run this
	// schedule (NotRun), or the spec has no more firings.
	NextFiring *time.Time `json:"next_firing"`
	Leader     *string    `json:"leader"`
	UpdatedAt  time.Time  `json:"updated_at"`
	// Active reports that a process holds the app's scheduler lock now.
	Active bool `json:"active"`
	// NotRun reports a schedule the active scheduler does not run
	// (removed or renamed): its row was last written by another leader
	// than the app's latest rows.
	NotRun bool `json:"not_run"`
	// LastAgo is now less LastFiring, NextIn NextFiring less now, on
	// Postgres's clock.
	LastAgo time.Duration `json:"-"`
	NextIn  time.Duration `json:"-"`
}

// Schedules returns the schedules recorded in the scheduler's state
// table, of app ("" for every app), by app and name. Whether an app has
// an active scheduler is read from Postgres's locks (the scheduler's
// advisory lock, in pg_locks).
func Schedules(ctx context.Context, db DB, app string) ([]Schedule, error) {
	rs, err := db.Query(ctx, `SELECT app, schedule, spec, last_firing, next_firing, leader, updated_at,
		coalesce(extract(epoch FROM now() - last_firing), 0)::float8, coalesce(extract(epoch FROM next_firing - now()), 0)::float8
		FROM `+scheduler.StateTable+` WHERE $1 = '' OR app = $1 ORDER BY app, schedule`, app)
	if err != nil {
		return nil, TableHint(fmt.Errorf("read the schedules: %w", err))
	}
	var out []Schedule
	var r Schedule
	var lastAgo, nextIn float64
	_, err = pgx.ForEachRow(rs, []any{&r.App, &r.Schedule, &r.Spec, &r.LastFiring, &r.NextFiring, &r.Leader, &r.UpdatedAt, &lastAgo, &nextIn}, func() error {
		r.LastAgo, r.NextIn = seconds(lastAgo), seconds(nextIn)
		out = append(out, r)
		r = Schedule{}
		return nil
	})
	if err != nil {
		return nil, TableHint(fmt.Errorf("read the schedules: %w", err))
	}
	return out, markActive(ctx, db, out)
}

// markActive sets Active and NotRun. The app's current leader is the one
// that wrote its latest row: the active scheduler writes all of its
// schedules' rows when it takes over. A row another leader wrote last is
// of a schedule the active one does not run.
func markActive(ctx context.Context, db DB, out []Schedule) error {
	active := map[string]bool{}
	current := map[string]*Schedule{}
	for i := range out {
		r := &out[i]
		if c := current[r.App]; c == nil || r.UpdatedAt.After(c.UpdatedAt) {
			current[r.App] = r
		}
	}
	for i := range out {
		r := &out[i]
		if _, ok := active[r.App]; !ok {
			held, err := SchedulerActive(ctx, db, r.App)
			if err != nil {
				return err
			}
			active[r.App] = held
		}
		r.Active = active[r.App]
		r.NotRun = r.Active && deref(r.Leader) != deref(current[r.App].Leader)
		if !r.Active || r.NotRun {
			r.NextFiring = nil
		}
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// SchedulerActive reports whether a session holds the advisory lock of
// app's active scheduler in this database.
func SchedulerActive(ctx context.Context, db DB, app string) (bool, error) {
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
