package main

// What the worker did with each destination's jobs, for the summary: a
// middleware that sees every run and a worker.Observer that sees every
// job's end and every breaker.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// tally counts, per host, what the worker did. Safe for concurrent use.
type tally struct {
	worker.NopObserver

	mu       sync.Mutex
	hosts    map[string]*hostTally
	finished int           // jobs that ended (ACCEPTed or discarded)
	changed  chan struct{} // a job ended; buffered, never blocks
	down     chan string   // the host of a breaker that opened; buffered, never blocks
}

// hostTally is one host's counts.
type hostTally struct {
	runs      int
	snoozed   int              // runs that snoozed their job (a 429)
	counts    map[string]int32 // highest delivery count seen, by job ID
	delivered int              // jobs that succeeded
	waited    int              // of them, jobs in hand before the host's breaker closed
	parked    int
	other     int // jobs that ended otherwise (discarded, interrupted)
	downs     int // times the host's breaker opened
	backs     int // times it closed
	backAt    time.Time
}

func newTally() *tally {
	return &tally{hosts: map[string]*hostTally{}, changed: make(chan struct{}, 1), down: make(chan string, 16)}
}

// host returns h's counts; t.mu held.
func (t *tally) host(h string) *hostTally {
	ht := t.hosts[h]
	if ht == nil {
		ht = &hostTally{counts: map[string]int32{}}
		t.hosts[h] = ht
	}
	return ht
}

// Middleware counts every run of a job: its delivery count, and whether
// it snoozed.
func (t *tally) Middleware(next handler.Handler) handler.Handler {
	return handler.Func(func(ctx context.Context, job *handler.Job) error {
		err := next.Handle(ctx, job)
		t.mu.Lock()
		defer t.mu.Unlock()
		ht := t.host(Host(job))
		ht.runs++
		ht.counts[job.ID()] = max(ht.counts[job.ID()], job.DeliveryCount)
		if _, ok := handler.SnoozeOf(err); ok {
			ht.snoozed++
		}
		return err
	})
}

// JobFinished counts the job's end; a job that succeeded after its host's
// breaker closed, and was produced before, waited for its host.
func (t *tally) JobFinished(job *handler.Job, res worker.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !res.Final {
		return // released for another delivery: it ends later
	}
	t.finished++
	ht := t.host(Host(job))
	switch res.Outcome {
	case worker.OutcomeSucceeded:
		ht.delivered++
		if !ht.backAt.IsZero() && job.Timestamp.Before(ht.backAt) {
			ht.waited++
		}
	case worker.OutcomeParked:
		ht.parked++
	default:
		ht.other++
	}
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// KeyDown counts a breaker opening (worker.KeyObserver).
func (t *tally) KeyDown(_, key string, _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.host(key).downs++
	select {
	case t.down <- key:
	default:
	}
}

// KeyBack counts a breaker closing (worker.KeyObserver).
func (t *tally) KeyBack(_, key string, _ time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ht := t.host(key)
	ht.backs++
	ht.backAt = time.Now()
}

var (
	_ worker.Observer    = (*tally)(nil)
	_ worker.KeyObserver = (*tally)(nil)
)

// ended returns how many jobs have ended.
func (t *tally) ended() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished
}

// Destination is what happened to one endpoint's webhooks.
type Destination struct {
	Name      string
	Behaviour string
	Jobs      int // webhooks enqueued for it

	// What the worker did.
	Delivered                    int // jobs that succeeded
	Waited                       int // of them, jobs held while the endpoint's breaker was open
	Snoozed                      int // runs snoozed by a 429
	Parked                       int // jobs parked in the DLQ
	Other                        int // jobs that ended otherwise: none
	Runs                         int // handler runs
	Redelivered                  int // jobs that ran on a delivery past the first: none
	BreakerOpened, BreakerClosed int

	// What the endpoint saw.
	Received   int // webhooks it accepted
	Duplicates int // 2xx answers beyond one per webhook
	Early      int // webhooks retried before their Retry-After was over
	MostAtOnce int // most requests it had in flight at once
}

// destination is e's line of the summary.
func (t *tally) destination(e *endpoint, jobs int) Destination {
	t.mu.Lock()
	defer t.mu.Unlock()
	ht := t.host(e.host)
	d := Destination{Name: e.name, Behaviour: e.behaviour.String(), Jobs: jobs,
		Delivered: ht.delivered, Waited: ht.waited, Snoozed: ht.snoozed, Parked: ht.parked, Other: ht.other,
		Runs: ht.runs, BreakerOpened: ht.downs, BreakerClosed: ht.backs}
	for _, c := range ht.counts {
		if c > 1 {
			d.Redelivered++
		}
	}
	d.Received, d.Duplicates, d.Early, d.MostAtOnce = e.received()
	return d
}

// Summary is what a run did.
type Summary struct {
	Destinations []Destination
	Took         time.Duration
}

// print writes the summary as a table.
func (s Summary) print(w io.Writer) {
	fmt.Fprintf(w, "\nevery webhook ended in %v:\n", s.Took.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "destination\tbehaviour\twebhooks\tdelivered\twaited\tsnoozed\tparked\tredelivered\tbreaker opened/closed\tmost at once\t")
	for _, d := range s.Destinations {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%d\t\n", d.Name, d.Behaviour, d.Jobs,
			d.Delivered, d.Waited, d.Snoozed, d.Parked, d.Redelivered, d.BreakerOpened, d.BreakerClosed, d.MostAtOnce)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "delivered: the endpoint answered 2xx; waited: held while the endpoint was down, taking no handler slot;")
	fmt.Fprintln(w, "snoozed: a 429 put off until its Retry-After; parked: a 4xx, in the DLQ topic; redelivered: jobs that spent a delivery;")
	fmt.Fprintf(w, "most at once: the endpoint's most requests in flight (the per-host limit is %d).\n", perHost)
}
