package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shareq/shareq/enqueue"
)

// A Spec says when a schedule fires: Next returns the first firing after
// t, or the zero time when there is none. [Every] and [Cron] are the
// specs of this package. Firings must be the same in every process (a
// pure function of t, without the process's start time or state), since
// each firing's unique key is built from its time, and whole
// microseconds, which is what Postgres keeps of a time.
type Spec interface {
	Next(t time.Time) time.Time
}

// Every returns a spec firing every d, at the multiples of d since the
// zero time (time.Time{}): Every(time.Hour) fires on the hour, UTC;
// Every(24*time.Hour) at midnight UTC. The firings are the same in every
// process, whenever it started. d must be at least a millisecond and a
// whole number of microseconds ([New] checks).
func Every(d time.Duration) Spec { return every(d) }

type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	if d <= 0 {
		return time.Time{}
	}
	return t.Truncate(d).Add(d)
}

func (e every) validate() error {
	d := time.Duration(e)
	if d < time.Millisecond || d%time.Microsecond != 0 {
		return fmt.Errorf("Every(%v): want at least 1ms, in whole microseconds", d)
	}
	return nil
}

// Missed says what the scheduler that becomes the active one does with
// the firings of a schedule that fell due while no scheduler ran (all
// processes down, or the time a failover takes): those after the last
// firing recorded in the state table and before the moment it took over.
type Missed int

const (
	// Skip enqueues none of the missed firings: the schedule goes on
	// with its next firing. The default, for jobs whose moment is gone
	// once passed (a reminder for a meeting that started).
	Skip Missed = iota
	// RunLast enqueues the latest missed firing once, at once, and none
	// of the earlier ones: for jobs that bring something up to date (the
	// nightly rebuild, a sync), where one run catches up for all.
	RunLast
)

func (m Missed) String() string {
	switch m {
	case Skip:
		return "skip"
	case RunLast:
		return "run-last"
	}
	return fmt.Sprintf("Missed(%d)", int(m))
}

// Schedule is one periodic job: a name, when it fires, and the job each
// firing enqueues.
type Schedule struct {
	// Name identifies the schedule within its app ([App]): in its state
	// row, and in the unique key of every firing. Renaming a schedule
	// makes it a new one, with no missed firings.
	Name string
	// Spec says when it fires: [Every] or a [Cron].
	Spec Spec
	// Topic and Value are the job of each firing: Value is encoded as
	// enqueue encodes it (JSON, or bytes as they are), with Options. The
	// job's ID is the firing's (app/name/time) unless Options give one.
	Topic   string
	Value   any
	Options []enqueue.Option
	// Job, when set instead of Topic and Value, builds the job of the
	// firing at at, at firing time. An error skips that firing (it is
	// logged and recorded as fired, not retried).
	Job func(ctx context.Context, at time.Time) (enqueue.Job, error)
	// Missed is the policy for firings missed while no scheduler ran;
	// Skip by default.
	Missed Missed
}

func (s Schedule) validate() error {
	switch {
	case s.Name == "":
		return errors.New("schedule with an empty name")
	case s.Spec == nil:
		return fmt.Errorf("schedule %q: nil Spec", s.Name)
	case s.Job == nil && s.Topic == "":
		return fmt.Errorf("schedule %q: neither Topic nor Job", s.Name)
	case s.Job != nil && (s.Topic != "" || s.Value != nil || s.Options != nil):
		return fmt.Errorf("schedule %q: Job and Topic, Value or Options: give one way", s.Name)
	case s.Missed != Skip && s.Missed != RunLast:
		return fmt.Errorf("schedule %q: unknown %v", s.Name, s.Missed)
	}
	if v, ok := s.Spec.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return fmt.Errorf("schedule %q: %w", s.Name, err)
		}
	}
	return nil
}

// job builds the job of the firing at.
func (s Schedule) job(ctx context.Context, id string, at time.Time) (enqueue.Job, error) {
	if s.Job != nil {
		j, err := s.Job(ctx, at)
		if err != nil {
			return enqueue.Job{}, err
		}
		if j.ID == "" {
			j.ID = id
		}
		return j, nil
	}
	return enqueue.NewJob(s.Topic, s.Value, append([]enqueue.Option{enqueue.ID(id)}, s.Options...)...), nil
}
