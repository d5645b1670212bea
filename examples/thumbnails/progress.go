package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// tracker is the demo's worker.Observer: it sees every acknowledgement the
// worker sends and so knows when each job has its final outcome. The demo
// ends when every job it produced has one.
//
// A job's outcome is final when its record is ACCEPTed (done, or parked in
// the DLQ), REJECTed, or RELEASEd on its last delivery (the broker then
// archives it). A RELEASE before the last delivery is not final: the job
// comes back. The same job can be acknowledged more than once (a lock ran
// out, the job ran again); only its first final outcome counts.
type tracker struct {
	want     int             // outcomes to wait for; 0: run until stopped
	expected map[string]bool // job IDs to wait for; nil: any job counts

	mu        sync.Mutex
	started   time.Time
	finished  map[string]outcome
	others    int // final outcomes of jobs not in expected
	released  int
	retried   map[string]bool   // jobs released at least once
	parked    map[string]string // job ID → reason, from the dlq middleware
	dupes     int               // accepted without running: already done
	renewals  int
	renewFail int
	running   int
	slowestID string
	slowest   time.Duration
	lastDone  time.Time
	done      chan struct{}
}

type outcome struct {
	kind   string // "done", "parked", "rejected", "archived"
	reason string
}

var _ worker.Observer = (*tracker)(nil)

// newTracker returns a tracker that is done after want final outcomes of
// the jobs in ids (of any jobs when ids is empty).
func newTracker(want int, ids []string) *tracker {
	t := &tracker{
		want:     want,
		started:  time.Now(),
		finished: make(map[string]outcome),
		retried:  make(map[string]bool),
		parked:   make(map[string]string),
		done:     make(chan struct{}),
	}
	if len(ids) > 0 {
		t.expected = make(map[string]bool, len(ids))
		for _, id := range ids {
			t.expected[id] = true
		}
	}
	return t
}

// Done is closed when every expected job has a final outcome.
func (t *tracker) Done() <-chan struct{} { return t.done }

func (t *tracker) JobStarted(*handler.Job) {
	t.mu.Lock()
	t.running++
	t.mu.Unlock()
}

func (t *tracker) JobFinished(job *handler.Job, res worker.Result) {
	id := job.ID()
	t.mu.Lock()
	defer t.mu.Unlock()
	if res.Ran {
		t.running--
		if res.Duration > t.slowest {
			t.slowest, t.slowestID = res.Duration, imageID(job)
		}
	}
	var o outcome
	switch res.Ack {
	case worker.AckAccept:
		// The worker cannot tell a parked job from a done one: the dlq
		// middleware returned nil after parking it. Its OnPark hook told
		// us (see parkedHook).
		o.kind = "done"
		if reason, ok := t.parked[id]; ok {
			o = outcome{"parked", reason}
		}
	case worker.AckReject:
		o = outcome{"rejected", handler.ReasonOf(res.Err)}
	case worker.AckRelease:
		t.released++
		t.retried[id] = true
		if !job.LastDelivery() {
			return // it comes back
		}
		o = outcome{"archived", handler.ReasonOf(res.Err)}
	}
	if _, seen := t.finished[id]; seen {
		return
	}
	if t.expected != nil && !t.expected[id] {
		t.others++
		return
	}
	t.finished[id] = o
	t.lastDone = time.Now()
	if t.want > 0 && len(t.finished) == t.want {
		close(t.done)
	}
}

// LockRenewed counts renewals: a job that runs past half its lock has it
// renewed by the worker.
func (t *tracker) LockRenewed(_ *handler.Job, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.renewFail++
		return
	}
	t.renewals++
}

func (t *tracker) AckFailed(string, int32, error) {}

// parkedHook is the dlq middleware's OnPark hook.
func (t *tracker) parkedHook(job *handler.Job, reason string) {
	t.mu.Lock()
	t.parked[job.ID()] = reason
	t.mu.Unlock()
}

// duplicateHook is the idempotency middleware's OnDuplicate hook.
func (t *tracker) duplicateHook(*handler.Job, string) {
	t.mu.Lock()
	t.dupes++
	t.mu.Unlock()
}

func imageID(job *handler.Job) string {
	if v, ok := job.Header(HeaderImageID); ok {
		return string(v)
	}
	return job.ID()
}

// counts is a snapshot of the tracker.
type counts struct {
	finished int
	done     int
	parked   map[string]int
	rejected map[string]int
	archived map[string]int
	released int
	retried  int // done jobs that needed more than one delivery
	dupes    int
	others   int
	running  int

	renewals       int
	renewalsFailed int
	slowestID      string
	slowest        time.Duration
	elapsed        time.Duration // from start to the last final outcome
}

func (t *tracker) snapshot() counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := counts{
		finished: len(t.finished), parked: map[string]int{}, rejected: map[string]int{}, archived: map[string]int{},
		released: t.released, dupes: t.dupes, others: t.others,
		running: t.running, slowestID: t.slowestID, slowest: t.slowest,
		renewals: t.renewals, renewalsFailed: t.renewFail,
	}
	for id, o := range t.finished {
		switch o.kind {
		case "done":
			c.done++
			if t.retried[id] {
				c.retried++
			}
		case "parked":
			c.parked[o.reason]++
		case "rejected":
			c.rejected[o.reason]++
		case "archived":
			c.archived[o.reason]++
		}
	}
	if !t.lastDone.IsZero() {
		c.elapsed = t.lastDone.Sub(t.started)
	}
	return c
}

// progressLine renders c for want jobs (0: unknown), as a bar when bar is
// set.
func progressLine(c counts, want int, since time.Duration, bar bool) string {
	var b strings.Builder
	rate := 0.0
	if s := since.Seconds(); s > 0 {
		rate = float64(c.finished) / s
	}
	if want > 0 {
		if bar {
			const width = 24
			full := min(width, c.finished*width/want)
			b.WriteString("[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "] ")
		}
		fmt.Fprintf(&b, "%d/%d jobs", c.finished, want)
	} else {
		fmt.Fprintf(&b, "%d jobs", c.finished)
	}
	fmt.Fprintf(&b, "  %.1f/s  running %d", rate, c.running)
	if c.released > 0 {
		fmt.Fprintf(&b, "  released %d", c.released)
	}
	if n := sum(c.parked); n > 0 {
		fmt.Fprintf(&b, "  parked %d", n)
	}
	if n := sum(c.rejected) + sum(c.archived); n > 0 {
		fmt.Fprintf(&b, "  failed %d", n)
	}
	if c.dupes > 0 {
		fmt.Fprintf(&b, "  duplicates %d", c.dupes)
	}
	if c.renewals > 0 {
		fmt.Fprintf(&b, "  renewals %d", c.renewals)
	}
	return b.String()
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// showProgress shows the progress line until stop is closed: redrawn five
// times a second on a terminal; elsewhere printed when it changes, at most
// every two seconds (and every 30 seconds when idle).
func showProgress(con *console, tr *tracker, want int, stop <-chan struct{}) {
	every := 2 * time.Second
	if con.tty {
		every = 200 * time.Millisecond
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	var last counts
	var lastAt time.Time
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c := tr.snapshot()
			if !con.tty && c.finished == last.finished && c.running == last.running && now.Sub(lastAt) < 30*time.Second {
				continue
			}
			last, lastAt = c, now
			con.status(progressLine(c, want, now.Sub(start), con.tty))
		}
	}
}
