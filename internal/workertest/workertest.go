// Package workertest records what a worker.Worker reports to its
// observers, for tests that check outcomes.
package workertest

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

// Event is one JobFinished call.
type Event struct {
	ID    string // job.ID()
	Key   string // the record's key
	Count int32  // the delivery count
	Res   worker.Result
	At    time.Time
}

// Recorder is a worker.Observer that keeps every event. Safe for
// concurrent use.
type Recorder struct {
	mu        sync.Mutex
	events    []Event
	started   []int32 // delivery counts of the jobs started
	renewed   int
	renewErrs int
	ackErrs   []error
	topics    []string // topic events, as "missing <topic>", "back <topic>", "recreated <topic>"
	changed   chan struct{}
}

var (
	_ worker.Observer      = (*Recorder)(nil)
	_ worker.TopicObserver = (*Recorder)(nil)
)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{changed: make(chan struct{}, 1)} }

func (r *Recorder) JobStarted(j *handler.Job) {
	r.mu.Lock()
	r.started = append(r.started, j.DeliveryCount)
	r.mu.Unlock()
}

func (r *Recorder) JobFinished(j *handler.Job, res worker.Result) {
	r.mu.Lock()
	r.events = append(r.events, Event{ID: j.ID(), Key: string(j.Key), Count: j.DeliveryCount, Res: res, At: time.Now()})
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *Recorder) LockRenewed(_ *handler.Job, err error) {
	r.mu.Lock()
	if err != nil {
		r.renewErrs++
	} else {
		r.renewed++
	}
	r.mu.Unlock()
}

func (r *Recorder) AckFailed(_ string, _ int32, err error) {
	r.mu.Lock()
	r.ackErrs = append(r.ackErrs, err)
	r.mu.Unlock()
}

func (r *Recorder) TopicMissing(topic string, missing bool) {
	what := "back "
	if missing {
		what = "missing "
	}
	r.mu.Lock()
	r.topics = append(r.topics, what+topic)
	r.mu.Unlock()
}

func (r *Recorder) TopicRecreated(topic string) {
	r.mu.Lock()
	r.topics = append(r.topics, "recreated "+topic)
	r.mu.Unlock()
}

// TopicEvents returns the topic watch's reports so far, in order: "missing
// <topic>", "back <topic>" or "recreated <topic>".
func (r *Recorder) TopicEvents() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.topics)
}

// Events returns the JobFinished events so far, in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Started returns the delivery counts of the jobs started so far.
func (r *Recorder) Started() []int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int32(nil), r.started...)
}

// Renewals returns how many lock renewals succeeded and failed.
func (r *Recorder) Renewals() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewed, r.renewErrs
}

// AckErrors returns the errors of the acknowledgements the broker
// rejected.
func (r *Recorder) AckErrors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.ackErrs...)
}

// Count returns how many jobs finished with ack (0: any).
func (r *Recorder) Count(ack worker.Ack) int {
	n := 0
	for _, e := range r.Events() {
		if ack == 0 || e.Res.Ack == ack {
			n++
		}
	}
	return n
}

// WaitFor waits until cond holds for the events so far and returns them,
// or fails t after timeout, with what it waited for and a [Summary] of
// the events.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]Event) bool) []Event {
	t.Helper()
	es, ok := r.Wait(timeout, cond)
	if !ok {
		t.Fatalf("timed out after %v waiting for %s; %s", timeout, what, Summary(es))
	}
	return es
}

// Wait waits until cond holds for the events so far, or timeout passes,
// and returns the events and whether cond held.
func (r *Recorder) Wait(timeout time.Duration, cond func([]Event) bool) ([]Event, bool) {
	deadline := time.After(timeout)
	for {
		es := r.Events()
		if cond(es) {
			return es, true
		}
		select {
		case <-r.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			es = r.Events()
			return es, cond(es)
		}
	}
}

// Summary describes events for a failure message: how many ended with
// each acknowledgement, then the last 40, each as [job #delivery ack
// ran err].
func Summary(es []Event) string {
	var b strings.Builder
	acks := map[worker.Ack]int{}
	for _, e := range es {
		acks[e.Res.Ack]++
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
		fmt.Fprintf(&b, " [%s #%d %v ran=%v err=%v]", job, e.Count, e.Res.Ack, e.Res.Ran, e.Res.Err)
	}
	return b.String()
}

// Logger returns a logger for a worker under test: Info and up to stderr
// with go test -v, nothing otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
