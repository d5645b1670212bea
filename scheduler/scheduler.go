package scheduler

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// StateTable holds the last firing of each schedule, created by migration
// 0005.
const StateTable = "shareq_scheduler_state"

// Defaults of the options.
const (
	AppDefault            = "default"
	RetryIntervalDefault  = 5 * time.Second
	CheckIntervalDefault  = 5 * time.Second
	FireTimeoutDefault    = 30 * time.Second
	SessionTimeoutDefault = 30 * time.Second
)

// An Option configures a [Scheduler]; [New] validates them once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	app            string
	schedules      []Schedule
	retryInterval  time.Duration
	checkInterval  time.Duration
	fireTimeout    time.Duration
	sessionTimeout time.Duration
	log            *slog.Logger
}

// App names the app the scheduler belongs to (AppDefault unless given):
// of all the schedulers of one app on one database, one is active. It
// scopes the advisory lock, the state rows and the firings' unique keys,
// so that two apps sharing a database schedule independently.
func App(name string) Option { return optionFunc(func(c *config) { c.app = name }) }

// Add adds schedules. Every process of the app should run the same ones:
// only the active scheduler's schedules fire.
func Add(s ...Schedule) Option {
	return optionFunc(func(c *config) { c.schedules = append(c.schedules, s...) })
}

// RetryInterval is how often a scheduler that is not the active one tries
// to become it, and how long it waits after losing its connection
// (RetryIntervalDefault). It bounds a failover's delay after the active
// scheduler's session ends.
func RetryInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryInterval = d })
}

// CheckInterval is how often the active scheduler checks, between
// firings, that its connection (and so its lock) is alive
// (CheckIntervalDefault).
func CheckInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.checkInterval = d })
}

// FireTimeout bounds the transaction that enqueues the firings due at one
// moment, and the reads and writes of a scheduler that takes over
// (FireTimeoutDefault). It is not cut short by Run's context: a
// stop waits for the firing under way.
func FireTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fireTimeout = d })
}

// SessionTimeout bounds how long the active scheduler keeps the lock
// while it sends Postgres nothing (SessionTimeoutDefault). Postgres ends
// its session after d without a statement (idle_session_timeout), or d
// inside a firing's transaction without the next statement
// (idle_in_transaction_session_timeout), and so frees the lock: a
// process frozen (SIGSTOP, a VM or container paused) or stalled, whose
// connection stays open, lets a follower take over after d plus the
// followers' RetryInterval, instead of blocking every firing for as long
// as it is frozen. The active scheduler renews it by its check every
// CheckInterval, which must be at most half of d; building a firing's
// job (Schedule.Job) must take less than d. Set on the lock's session
// only: the followers and the pool's other connections keep the
// server's settings. It needs Postgres 14 or later.
func SessionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionTimeout = d })
}

// Logger sets the logger (slog.Default() unless given).
func Logger(l *slog.Logger) Option { return optionFunc(func(c *config) { c.log = l }) }

// Scheduler enqueues the firings of its schedules through the outbox
// while it is the active scheduler of its app. Safe for concurrent use;
// Run once.
type Scheduler struct {
	pool    *pgxpool.Pool
	cfg     config
	lockKey int64
	now     func() time.Time // time.Now

	leader string // instance(): this process in the state table

	started  atomic.Bool
	leading  atomic.Bool // written by Run's loop
	counters *counters
}

// New returns a scheduler that takes its dedicated connection from pool
// and enqueues into pool's outbox. It validates opts: at least one
// schedule, unique names, valid specs, positive intervals.
func New(pool *pgxpool.Pool, opts ...Option) (*Scheduler, error) {
	if pool == nil {
		return nil, errors.New("scheduler: nil pool")
	}
	c := config{app: AppDefault, retryInterval: RetryIntervalDefault, checkInterval: CheckIntervalDefault, fireTimeout: FireTimeoutDefault, sessionTimeout: SessionTimeoutDefault}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	switch {
	case c.app == "":
		return nil, errors.New("scheduler: empty App")
	case len(c.schedules) == 0:
		return nil, errors.New("scheduler: no schedules (Add)")
	case c.retryInterval <= 0, c.checkInterval <= 0, c.fireTimeout <= 0:
		return nil, fmt.Errorf("scheduler: RetryInterval %v, CheckInterval %v, FireTimeout %v: want them positive", c.retryInterval, c.checkInterval, c.fireTimeout)
	case c.sessionTimeout < 2*c.checkInterval || c.sessionTimeout%time.Millisecond != 0:
		return nil, fmt.Errorf("scheduler: SessionTimeout %v: want whole milliseconds, and at least twice CheckInterval (%v), which renews it", c.sessionTimeout, c.checkInterval)
	}
	seen := map[string]bool{}
	for _, s := range c.schedules {
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("scheduler: two schedules named %q", s.Name)
		}
		seen[s.Name] = true
	}
	c.log = c.log.With(slog.String("app", c.app))
	return &Scheduler{pool: pool, cfg: c, lockKey: LockKey(c.app), now: time.Now, leader: instance(), counters: newCounters(c.schedules)}, nil
}

// LockKey returns the key of the session-level advisory lock that the
// active scheduler of app holds (pg_try_advisory_lock(key)): in pg_locks
// it is the advisory lock with classid key>>32, objid key&0xffffffff and
// objsubid 1. shareq jobs schedules reads it there to tell whether an app
// has an active scheduler.
func LockKey(app string) int64 {
	h := fnv.New64a()
	h.Write([]byte("shareq/scheduler/" + app))
	return int64(h.Sum64())
}

// Leading reports whether the scheduler is the active one of its app now:
// it holds the advisory lock and its connection passed its last check.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

// Firing is one firing of a schedule.
type Firing struct {
	Schedule string
	At       time.Time
}

// Upcoming returns the next n firings of each schedule after t, in time
// order (then by name). It reads no state: missed firings are not in it.
func (s *Scheduler) Upcoming(t time.Time, n int) []Firing {
	var out []Firing
	for _, sc := range s.cfg.schedules {
		at := t
		for range n {
			if at = sc.Spec.Next(at); at.IsZero() {
				break
			}
			out = append(out, Firing{Schedule: sc.Name, At: at})
		}
	}
	slices.SortStableFunc(out, func(a, b Firing) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Schedule, b.Schedule)
	})
	return out
}

// Check returns an error, saying to run the migrations, when the state
// table (with the columns of migration 0006) or the outbox is missing.
func (s *Scheduler) Check(ctx context.Context) error {
	for _, t := range []string{StateTable, pgoutbox.Table, pgoutbox.UniqueTable} {
		if _, err := s.pool.Exec(ctx, "SELECT 1 FROM "+t+" LIMIT 0"); err != nil {
			return fmt.Errorf("scheduler: table %s: %w (run the migrations: migrations.Up)", t, err)
		}
	}
	if _, err := s.pool.Exec(ctx, "SELECT spec, next_firing, leader FROM "+StateTable+" LIMIT 0"); err != nil {
		return fmt.Errorf("scheduler: table %s: %w (run the migrations: migrations.Up, which applies 0006)", StateTable, err)
	}
	var idle *string
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('idle_session_timeout', true)").Scan(&idle); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if idle == nil {
		return errors.New("scheduler: Postgres has no idle_session_timeout, which bounds a frozen active scheduler's hold on the lock (SessionTimeout): it needs Postgres 14 or later")
	}
	return nil
}

// Run takes part in the election of its app's active scheduler until ctx
// is done, and fires the schedules while it is the active one; it returns
// nil then, after the firing under way. It fails at once when the tables
// are missing ([Scheduler.Check]); database errors later are logged and
// retried, never returned.
//
// The active scheduler holds a session-level advisory lock
// (pg_try_advisory_lock) on a connection of its own, taken from the pool
// and never returned to it, and enqueues every firing in a transaction on
// that connection: a firing commits only while the session, and so the
// lock, is alive. When the connection dies, Postgres ends the session and
// frees the lock for another scheduler, and this one stops firing: its
// next firing or check fails, and it goes back to trying for the lock.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("scheduler: Run called twice")
	}
	if err := s.Check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for {
		err := s.term(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
		case sessionTimedOut(err):
			s.counters.failed()
			s.cfg.log.WarnContext(ctx, "scheduler: Postgres ended the lock's session after SessionTimeout without a statement (this process was frozen or stalled); "+
				"another scheduler may be active; trying again for the lock", slog.Duration("session_timeout", s.cfg.sessionTimeout), slog.Any("err", err))
		default:
			s.counters.failed()
			s.cfg.log.WarnContext(ctx, "scheduler: database error; trying again for the lock", slog.Any("err", err))
		}
		if !sleep(ctx, s.cfg.retryInterval) {
			return nil
		}
	}
}

// term holds one dedicated connection: it tries for the lock on it every
// RetryInterval, and leads while it holds it, until the connection fails
// or ctx is done.
func (s *Scheduler) term(ctx context.Context) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // never back in the pool: it may hold the lock
	defer func() {
		s.leading.Store(false)
		s.counters.unlead()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx) // ends the session, and so frees the lock
	}()
	timeout := strconv.FormatInt(s.cfg.sessionTimeout.Milliseconds(), 10)
	for {
		var got bool
		if err := conn.QueryRow(ctx, lockSQL, s.lockKey, timeout).Scan(&got); err != nil {
			return err
		}
		if got {
			return s.lead(ctx, conn)
		}
		if !sleep(ctx, s.cfg.retryInterval) {
			return nil
		}
	}
}

// lockSQL tries for the lock ($1) and, in the same statement, when it
// got it, bounds the session's idle time by SessionTimeout ($2, ms), so
// that no moment holds the lock unbounded. A follower's session keeps the
// server's settings (its RetryInterval may be longer).
const lockSQL = `SELECT CASE WHEN pg_try_advisory_lock($1)
	THEN set_config('idle_session_timeout', $2, false) IS NOT NULL
		AND set_config('idle_in_transaction_session_timeout', $2, false) IS NOT NULL
	ELSE false END`

// sessionTimedOut reports whether err is Postgres ending the session on
// idle_session_timeout (57P05) or idle_in_transaction_session_timeout
// (25P03): SessionTimeout ran out.
func sessionTimedOut(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "57P05" || pe.Code == "25P03")
}

// maxDue bounds the firings of one schedule enqueued at once, after a
// stall of the active scheduler (a suspended machine): the latest maxDue
// are kept, and the older ones dropped with a warning.
const maxDue = 100

// state is one schedule's place in the active scheduler's loop.
type state struct {
	sched Schedule
	next  time.Time // its next firing; zero when it has none
}

// lead fires the schedules on conn, which holds the lock, until conn fails
// or ctx is done.
func (s *Scheduler) lead(ctx context.Context, conn *pgx.Conn) error {
	s.leading.Store(true)
	s.counters.elected()
	now := s.now()
	s.cfg.log.InfoContext(ctx, "scheduler: active", slog.String("leader", s.leader))
	// The takeover's reads and writes are bounded like a firing: a
	// network gone silent under them would hold this scheduler leading
	// for ever, with the lock long freed.
	tctx, cancel := context.WithTimeout(ctx, s.cfg.fireTimeout)
	defer cancel()
	last, err := s.lastFirings(tctx, conn)
	if err != nil {
		return err
	}
	states := make([]*state, len(s.cfg.schedules))
	var catchUp []Firing
	for i, sc := range s.cfg.schedules {
		st := &state{sched: sc, next: sc.Spec.Next(now)}
		states[i] = st
		l, ok := last[sc.Name]
		if !ok {
			continue // a new schedule has missed nothing
		}
		missed := lastBefore(sc.Spec, l, now)
		if missed.IsZero() {
			continue
		}
		switch sc.Missed {
		case RunLast:
			catchUp = append(catchUp, Firing{Schedule: sc.Name, At: missed})
			s.cfg.log.InfoContext(ctx, "scheduler: running the last missed firing", slog.String("schedule", sc.Name), slog.Time("firing", missed))
		case Skip:
			s.cfg.log.InfoContext(ctx, "scheduler: skipping missed firings", slog.String("schedule", sc.Name), slog.Time("after", l), slog.Time("through", missed))
		}
	}
	if err := s.announce(tctx, conn, states); err != nil {
		return err
	}
	cancel()
	if len(catchUp) > 0 {
		if err := s.fire(ctx, conn, catchUp); err != nil {
			return err
		}
	}
	checked := s.now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := s.now()
		var due []Firing
		wake := now.Add(s.cfg.checkInterval)
		for i, st := range states {
			var n, dropped int
			for !st.next.IsZero() && !st.next.After(now) {
				if n == maxDue {
					due = slices.Delete(due, len(due)-maxDue, len(due)-maxDue+1)
					dropped++
				} else {
					n++
				}
				due = append(due, Firing{Schedule: st.sched.Name, At: st.next})
				st.next = st.sched.Spec.Next(st.next)
			}
			if n > 0 {
				s.counters.setNext(i, st.next)
			}
			if dropped > 0 {
				s.cfg.log.WarnContext(ctx, "scheduler: stalled for more than its firings allow; dropped the oldest",
					slog.String("schedule", st.sched.Name), slog.Int("dropped", dropped), slog.Int("kept", maxDue))
			}
			if !st.next.IsZero() && st.next.Before(wake) {
				wake = st.next
			}
		}
		if len(due) > 0 {
			// Of several firings of one schedule due at once (a stall
			// longer than its period), all are enqueued, up to maxDue:
			// they fell due while this scheduler was active, so they are
			// not missed.
			if err := s.fire(ctx, conn, due); err != nil {
				return err
			}
			checked = s.now() // the commit went through the connection
			continue
		}
		timer.Reset(wake.Sub(now))
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if s.now().Sub(checked) >= s.cfg.checkInterval {
			// Bounded by SessionTimeout: past it, Postgres has ended
			// the session anyway (a network gone silent holds a ping
			// unanswered).
			pctx, cancel := context.WithTimeout(ctx, s.cfg.sessionTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("check: %w", err)
			}
			checked = s.now()
		}
	}
}

// lastBefore returns the latest firing of spec after l and at or before
// now, or the zero time when there is none.
func lastBefore(spec Spec, l, now time.Time) time.Time {
	var last time.Time
	for at := spec.Next(l); !at.IsZero() && !at.After(now); at = spec.Next(at) {
		last = at
	}
	return last
}

func (s *Scheduler) lastFirings(ctx context.Context, conn *pgx.Conn) (map[string]time.Time, error) {
	rows, err := conn.Query(ctx, "SELECT schedule, last_firing FROM "+StateTable+" WHERE app = $1 AND last_firing IS NOT NULL", s.cfg.app)
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	var name string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&name, &at}, func() error {
		out[name] = at
		return nil
	})
	return out, err
}

// key returns the unique key, and job ID, of the firing at of schedule
// name.
func (s *Scheduler) key(name string, at time.Time) string {
	return s.cfg.app + "/" + name + "/" + at.UTC().Format(time.RFC3339Nano)
}

// UniqueKey returns the outbox unique key of the firing at of the
// schedule name of app: "shareq/scheduler/" + app/name/time (RFC 3339,
// UTC). The firing's job ID is app/name/time.
func UniqueKey(app, name string, at time.Time) string {
	return "shareq/scheduler/" + app + "/" + name + "/" + at.UTC().Format(time.RFC3339Nano)
}

// recordSQL records a firing as its schedule's last (unless a later one
// is recorded), with the next firing after it, the spec and the leader.
const recordSQL = `INSERT INTO ` + StateTable + ` AS s (app, schedule, last_firing, next_firing, spec, leader) VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (app, schedule) DO UPDATE SET
		next_firing = CASE WHEN s.last_firing IS NULL OR excluded.last_firing >= s.last_firing THEN excluded.next_firing ELSE s.next_firing END,
		last_firing = greatest(s.last_firing, excluded.last_firing),
		spec = excluded.spec, leader = excluded.leader, updated_at = now()`

// announceSQL records every schedule's spec, next firing and leader when a
// scheduler becomes the active one; a schedule's row without a firing has
// last_firing NULL.
const announceSQL = `INSERT INTO ` + StateTable + ` AS s (app, schedule, spec, next_firing, leader)
	SELECT $1, u.name, u.spec, u.next, $5 FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS u(name, spec, next)
	ON CONFLICT (app, schedule) DO UPDATE SET spec = excluded.spec, next_firing = excluded.next_firing, leader = excluded.leader, updated_at = now()`

// announce writes every schedule's row for operators (migration 0006).
func (s *Scheduler) announce(ctx context.Context, conn *pgx.Conn, states []*state) error {
	names, specs, next := make([]string, len(states)), make([]string, len(states)), make([]pgtype.Timestamptz, len(states))
	for i, st := range states {
		names[i], specs[i], next[i] = st.sched.Name, SpecText(st.sched.Spec), timestamptz(st.next)
		s.counters.setNext(i, st.next)
	}
	_, err := conn.Exec(ctx, announceSQL, s.cfg.app, names, specs, next, s.leader)
	return err
}

// timestamptz is t, or NULL for the zero time.
func timestamptz(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// fire enqueues firings in one transaction on conn, each with the unique
// key of its schedule and time for the schedule's period, due at its
// time, and records each schedule's latest firing. It is not cut short by
// ctx.
func (s *Scheduler) fire(ctx context.Context, conn *pgx.Conn, firings []Firing) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.fireTimeout)
	defer cancel()
	byName := make(map[string]Schedule, len(s.cfg.schedules))
	for _, sc := range s.cfg.schedules {
		byName[sc.Name] = sc
	}
	outs := make([]outcome, 0, len(firings))
	err := pgx.BeginFunc(fctx, conn, func(tx pgx.Tx) error {
		outs = outs[:0]
		for _, f := range firings {
			sc := byName[f.Schedule]
			log := s.cfg.log.With(slog.String("schedule", f.Schedule), slog.Time("firing", f.At))
			res, err := s.enqueue(fctx, tx, sc, f.At)
			switch {
			case errors.Is(err, errSkip):
				// This firing is skipped, not retried: its job cannot be
				// built or encoded, which another try would not change.
				log.ErrorContext(fctx, "scheduler: firing skipped", slog.Any("err", err))
				outs = append(outs, outcome{f, resultSkipped})
			case err != nil:
				return err
			case res.Duplicate:
				log.DebugContext(fctx, "scheduler: firing already enqueued", slog.String("job_id", res.ID))
				outs = append(outs, outcome{f, resultDuplicate})
			default:
				log.DebugContext(fctx, "scheduler: fired", slog.String("job_id", res.ID))
				outs = append(outs, outcome{f, resultEnqueued})
			}
			next := timestamptz(sc.Spec.Next(f.At))
			if _, err := tx.Exec(fctx, recordSQL, s.cfg.app, f.Schedule, f.At, next, SpecText(sc.Spec), s.leader); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.counters.committed(outs, s.now())
	return nil
}

// errSkip marks the errors of a firing whose job cannot be enqueued.
var errSkip = errors.New("scheduler: firing skipped")

// enqueue enqueues the firing at of sc in tx. Its job is built and
// encoded before any statement, so that a job that cannot be (errSkip)
// leaves tx usable.
func (s *Scheduler) enqueue(ctx context.Context, tx pgx.Tx, sc Schedule, at time.Time) (pgoutbox.Result, error) {
	job, err := sc.job(ctx, s.key(sc.Name, at), at)
	if err != nil {
		return pgoutbox.Result{}, fmt.Errorf("%w: build the job: %w", errSkip, err)
	}
	r, err := job.Record()
	if err != nil {
		return pgoutbox.Result{}, fmt.Errorf("%w: %w", errSkip, err)
	}
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	if n > pgoutbox.MaxRecordBytes {
		return pgoutbox.Result{}, fmt.Errorf("%w: job of %d bytes, over pgoutbox.MaxRecordBytes", errSkip, n)
	}
	return pgoutbox.EnqueueJobTx(ctx, tx, job, pgoutbox.At(at), pgoutbox.UniqueFor(UniqueKey(s.cfg.app, sc.Name, at), period(sc.Spec, at)))
}

// period returns the time from the firing at to the next one of spec: the
// unique key of a firing is kept that long after its job was produced.
func period(spec Spec, at time.Time) time.Duration {
	n := spec.Next(at)
	if n.IsZero() {
		return 0
	}
	return n.Sub(at)
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
