package scheduler

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Stats are what a scheduler did since it was created, for metrics
// (metrics/outboxmetrics exports them as Prometheus metrics) and logs.
// The counters only grow. They are this process's: every process of an
// app counts its own firings, while it leads.
type Stats struct {
	// App is the scheduler's app ([App]).
	App string
	// Leading is [Scheduler.Leading]: whether this process is its app's
	// active scheduler now.
	Leading bool
	// Elections counts the times it became the active scheduler.
	Elections uint64
	// Errors counts the database errors that ended a term of trying for
	// the lock or of leading: a lost connection, a failed check, a
	// firing transaction that failed (its firings are enqueued by the
	// next active scheduler, or skipped by the policy of its schedule).
	Errors uint64
	// Schedules are the schedules' own counters, in the order they were
	// added.
	Schedules []ScheduleStats
}

// ScheduleStats are the counters of one schedule in [Stats]. A firing is
// counted once its transaction has committed.
type ScheduleStats struct {
	Name string
	// Enqueued counts the firings this scheduler enqueued.
	Enqueued uint64
	// Duplicates counts the firings it found enqueued already, by its
	// unique key: by another scheduler that led for a moment alongside
	// it, or by one that died after its commit. No job was added.
	Duplicates uint64
	// Skipped counts the firings whose job could not be built or
	// encoded (logged at Error); they are not retried.
	Skipped uint64
	// EnqueueDelay is the sum, over EnqueueDelayCount enqueued firings,
	// of the time from each firing's time to its commit in the outbox,
	// on this process's clock: how late the scheduler enqueues. A
	// missed firing run by [RunLast] counts its whole lateness. The
	// relay's due delay (pgoutbox.Stats.DueDelay) is the rest of the way
	// to Kafka.
	EnqueueDelay      time.Duration
	EnqueueDelayCount uint64
	// LastFiring is the latest firing this scheduler enqueued or found
	// enqueued; zero when none.
	LastFiring time.Time
	// NextFiring is the schedule's next firing while this scheduler
	// leads; zero otherwise, or when the schedule has none.
	NextFiring time.Time
}

// counters are a scheduler's Stats, under their own lock: Run's loop
// writes them, Stats reads them from any goroutine.
type counters struct {
	mu        sync.Mutex
	elections uint64
	errors    uint64
	sched     []ScheduleStats // by the index of cfg.schedules
	index     map[string]int
}

func newCounters(schedules []Schedule) *counters {
	c := &counters{sched: make([]ScheduleStats, len(schedules)), index: make(map[string]int, len(schedules))}
	for i, sc := range schedules {
		c.sched[i].Name = sc.Name
		c.index[sc.Name] = i
	}
	return c
}

// outcome is one firing of a committed transaction, for the counters.
type outcome struct {
	f   Firing
	res firingResult
}

type firingResult int

const (
	resultEnqueued firingResult = iota
	resultDuplicate
	resultSkipped
)

// committed counts the firings of a transaction that committed at t.
func (c *counters) committed(outs []outcome, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range outs {
		st := &c.sched[c.index[o.f.Schedule]]
		switch o.res {
		case resultEnqueued:
			st.Enqueued++
			st.EnqueueDelay += max(0, t.Sub(o.f.At))
			st.EnqueueDelayCount++
		case resultDuplicate:
			st.Duplicates++
		case resultSkipped:
			st.Skipped++
		}
		if o.res != resultSkipped && o.f.At.After(st.LastFiring) {
			st.LastFiring = o.f.At
		}
	}
}

// setNext records the next firing of the schedule i (zero: none, or not
// leading).
func (c *counters) setNext(i int, next time.Time) {
	c.mu.Lock()
	c.sched[i].NextFiring = next
	c.mu.Unlock()
}

// unlead clears the next firings when the scheduler stops leading.
func (c *counters) unlead() {
	c.mu.Lock()
	for i := range c.sched {
		c.sched[i].NextFiring = time.Time{}
	}
	c.mu.Unlock()
}

func (c *counters) elected() {
	c.mu.Lock()
	c.elections++
	c.mu.Unlock()
}

func (c *counters) failed() {
	c.mu.Lock()
	c.errors++
	c.mu.Unlock()
}

// Stats returns the scheduler's counters. Safe to call at any time, from
// any goroutine.
func (s *Scheduler) Stats() Stats {
	c := s.counters
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{App: s.cfg.app, Leading: s.leading.Load(), Elections: c.elections, Errors: c.errors,
		Schedules: append([]ScheduleStats(nil), c.sched...)}
}

// SpecText is how the state table (migration 0006) and shareq jobs
// schedules show spec: its String method's result when it has one
// ("every 1h0m0s", a cron expression, with its time zone when that is not
// UTC), else its Go type.
func SpecText(spec Spec) string {
	switch sp := spec.(type) {
	case *Cron:
		if loc := sp.Location(); loc != time.UTC {
			return sp.String() + " (" + loc.String() + ")"
		}
		return sp.String()
	case fmt.Stringer:
		return sp.String()
	}
	return fmt.Sprintf("%T", spec)
}

// String returns "every " and the interval.
func (e every) String() string { return "every " + time.Duration(e).String() }

// instance names this process in the state table's leader column:
// hostname/pid.
func instance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}
