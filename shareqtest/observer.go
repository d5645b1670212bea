package shareqtest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// observerPoll is how often a wait re-checks its condition when no job
// finishes, for conditions that read state of the test's own.
const observerPoll = 100 * time.Millisecond

// Event is one job a worker finished: one call of the worker's
// [worker.Observer.JobFinished], with the acknowledgement it sent.
type Event struct {
	// ID is the job's ID ([handler.Job.ID]).
	ID string
	// Key is the record's key, as a string, for comparisons.
	Key string
	// Count is the record's delivery count: 1 on the first delivery.
	Count int32
	// Result is what the worker reported: outcome, acknowledgement,
	// the handler's error, and whether the broker will deliver the
	// record again (Result.Final).
	Result worker.Result
	// At is when the worker reported it.
	At time.Time
}

// Observer is a [worker.Observer] that records every job a worker
// finishes, for tests that build and run a worker of their own (their
// app's constructor, a real broker, workerfx) rather than through
// [Queue.Run]: pass it with worker.Observers and wait for the
// outcomes with [Observer.WaitJob] or [Observer.WaitFor]. The zero
// Observer is ready to use; it is safe for concurrent use, and one
// Observer may watch several workers.
type Observer struct {
	mu        sync.Mutex
	events    []Event
	renewed   int
	renewErrs int
	changed   chan struct{} // a token after each event; made on first use
}

var _ worker.Observer = (*Observer)(nil)

// changes returns the channel that gets a token after each event.
func (o *Observer) changes() chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{}, 1)
	}
	return o.changed
}

// JobStarted implements [worker.Observer]; it records nothing.
func (o *Observer) JobStarted(*handler.Job) {}

// JobFinished implements [worker.Observer]: it records the job and how
// it ended as an [Event].
func (o *Observer) JobFinished(j *handler.Job, res worker.Result) {
	ch := o.changes()
	o.mu.Lock()
	o.events = append(o.events, Event{ID: j.ID(), Key: string(j.Key), Count: j.DeliveryCount, Result: res, At: time.Now()})
	o.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// LockRenewed implements [worker.Observer]: it counts the renewals of
// running jobs' locks, for [Observer.Renewals].
func (o *Observer) LockRenewed(_ *handler.Job, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.renewErrs++
	} else {
		o.renewed++
	}
}

// AckFailed implements [worker.Observer]; it records nothing (the
// worker logs a failed acknowledgement, and the record is delivered
// again).
func (o *Observer) AckFailed(string, int32, error) {}

// Events returns the jobs finished so far, in the order the worker
// reported them.
func (o *Observer) Events() []Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.events)
}

// Count returns how many jobs finished with the acknowledgement ack, or
// in all when ack is 0.
func (o *Observer) Count(ack worker.Ack) int {
	n := 0
	for _, e := range o.Events() {
		if ack == 0 || e.Result.Ack == ack {
			n++
		}
	}
	return n
}

// Renewals returns how many renewals of a running job's lock succeeded
// and how many failed.
func (o *Observer) Renewals() (ok, failed int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.renewed, o.renewErrs
}

// WaitFor waits until cond holds for the events so far and returns
// them. cond is called after each event and at least every 100 ms, so it
// may also read state of the test's own. WaitFor fails t if cond does
// not hold within timeout, saying what it waited for and with a
// [Summary] of the events.
func (o *Observer) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]Event) bool) []Event {
	t.Helper()
	changed := o.changes()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(observerPoll)
	defer poll.Stop()
	for {
		es := o.Events()
		if cond(es) {
			return es
		}
		select {
		case <-changed:
		case <-poll.C:
		case <-deadline.C:
			if es = o.Events(); cond(es) {
				return es
			}
			t.Fatalf("shareqtest: timed out after %v waiting for %s; %s", timeout, what, Summary(es))
			return nil
		}
	}
}

// WaitJob waits until the job with ID id has finished for good (its
// Result.Final: accepted, rejected, or released on its last delivery,
// so the broker will not deliver it again) and returns that event. It
// fails t if that does not happen within timeout, with a [Summary] of
// the events.
func (o *Observer) WaitJob(t testing.TB, timeout time.Duration, id string) Event {
	t.Helper()
	var final Event
	o.WaitFor(t, timeout, "job "+id+" to finish for good", func(es []Event) bool {
		for _, e := range es {
			if e.ID == id && e.Result.Final {
				final = e
				return true
			}
		}
		return false
	})
	return final
}

// Summary describes events for a failure message: how many ended with
// each acknowledgement, then the last 40, each as
// [job #delivery ack ran=… err=…].
func Summary(es []Event) string {
	var b strings.Builder
	acks := map[worker.Ack]int{}
	for _, e := range es {
		acks[e.Result.Ack]++
	}
	fmt.Fprintf(&b, "%d events (%d accept, %d release, %d reject)", len(es),
		acks[worker.AckAccept], acks[worker.AckRelease], acks[worker.AckReject])
	if len(es) > 40 {
		es = es[len(es)-40:]
		b.WriteString("; last 40:")
	}
	for _, e := range es {
		job := e.ID
		if e.Key != "" && e.Key != e.ID {
			job += " (key " + e.Key + ")"
		}
		fmt.Fprintf(&b, " [%s #%d %v ran=%v err=%v]", job, e.Count, e.Result.Ack, e.Result.Ran, e.Result.Err)
	}
	return b.String()
}

// Logger returns a logger for a worker under test (worker.Logger): Info
// and above to stderr when the test runs with go test -v, nothing
// otherwise. It does not write through t.Log, which panics once the
// test has ended, as a worker stopping after it may still log.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
