package handler

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// BatchFunc handles jobs of one topic together and returns each job's
// outcome, in the order of jobs: nil succeeds, [Permanent] fails for good,
// [RetryAfter] or any other error retries that job alone. A returned
// slice whose length is not len(jobs) fails every job of the batch (they
// retry).
type BatchFunc func(ctx context.Context, jobs []*Job) []error

// Batcher is a [Handler] that gathers the jobs it is given into calls of
// a [BatchFunc]. Build one with [Batch].
type Batcher struct {
	size int
	wait time.Duration
	fn   BatchFunc

	mu   sync.Mutex
	open map[string]*batch // by topic: the batch gathering its jobs
}

// batch is one call of a Batcher's function in the making.
type batch struct {
	topic   string
	jobs    []*Job
	ctxs    []context.Context
	full    chan struct{} // closed when the batch is full or its wait ended
	done    chan struct{} // closed when fn returned
	errs    []error
	started bool
}

// Batch returns a Handler that runs fn on up to size jobs at once: a job's
// call waits for company until the batch has size jobs or wait has passed
// since the first job joined, then fn runs once for all of them and each
// call returns its own job's outcome. Register it as a topic's handler
// (worker.Handle; a Batcher given to several topics gathers each topic's
// jobs apart): every job of a batch still holds its own handler slot
// and passes through every middleware of the chain on its own, so retries,
// parking, renewals, timeouts, tracing and logging are per job as for any
// handler, and the worker's Concurrency must be at least size (worker.New
// refuses less). A job whose context ends while it waits leaves the batch
// with the context's error; once fn runs, its context ends when every
// job's context has ended (a shutdown, or each job's timeout), and it
// carries the values of the first job's context.
//
// Batch panics if size < 1 or wait < 0, as a programming error.
func Batch(size int, wait time.Duration, fn BatchFunc) *Batcher {
	if size < 1 || wait < 0 || fn == nil {
		panic(fmt.Sprintf("handler.Batch(%d, %v, fn): want size >= 1, wait >= 0 and a function", size, wait))
	}
	return &Batcher{size: size, wait: wait, fn: fn, open: make(map[string]*batch)}
}

// BatchSize returns the most jobs a call of the batch function gets.
func (b *Batcher) BatchSize() int { return b.size }

// Handle adds job to the open batch of its topic (opening one if none
// is) and returns its outcome once the batch ran.
func (b *Batcher) Handle(ctx context.Context, job *Job) error {
	bt, i, first := b.join(ctx, job)
	if first {
		b.lead(ctx, bt)
	}
	select {
	case <-bt.full:
	case <-ctx.Done():
		if b.leave(bt, job) {
			return ctx.Err()
		}
		<-bt.full // it started meanwhile: wait for its outcome
	}
	if b.claim(bt) {
		b.run(bt)
	}
	<-bt.done
	return bt.errs[i]
}

// join adds job to the open batch of its topic and returns it, the job's index in it,
// and whether the job opened it.
func (b *Batcher) join(ctx context.Context, job *Job) (*batch, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt := b.open[job.Topic]
	first := bt == nil
	if first {
		bt = &batch{topic: job.Topic, full: make(chan struct{}), done: make(chan struct{})}
		b.open[job.Topic] = bt
	}
	bt.jobs, bt.ctxs = append(bt.jobs, job), append(bt.ctxs, ctx)
	if len(bt.jobs) == b.size {
		b.close(bt)
	}
	return bt, len(bt.jobs) - 1, first
}

// close ends the gathering of bt; b.mu is held.
func (b *Batcher) close(bt *batch) {
	if b.open[bt.topic] == bt {
		delete(b.open, bt.topic)
		close(bt.full)
	}
}

// lead waits, as the first job of bt, until it is full or its wait ends,
// or the first job's context ends (then the others go on without it:
// Handle's leave).
func (b *Batcher) lead(ctx context.Context, bt *batch) {
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case <-bt.full:
	case <-t.C:
		b.mu.Lock()
		b.close(bt)
		b.mu.Unlock()
	case <-ctx.Done():
	}
}

// leave takes job out of bt if bt is still gathering, and reports whether
// it did. It also ends the gathering: the first job's timer may be gone
// with it, and a job leaves only when its context ends (a shutdown, a
// lost lock), when the others are better run at once.
func (b *Batcher) leave(bt *batch, job *Job) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-bt.full:
		return false
	default:
	}
	for i, j := range bt.jobs {
		if j == job {
			bt.jobs[i] = nil // kept in place: indexes are the callers'
			bt.ctxs[i] = nil
			break
		}
	}
	b.close(bt)
	return true
}

// claim reports whether the caller is the one to run bt (the first to ask
// once it is full).
func (b *Batcher) claim(bt *batch) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bt.started {
		return false
	}
	bt.started = true
	return true
}

// run calls fn with bt's jobs still in it and spreads the outcomes.
func (b *Batcher) run(bt *batch) {
	defer close(bt.done)
	var jobs []*Job
	var at []int
	var ctxs []context.Context
	for i, j := range bt.jobs {
		if j != nil {
			jobs, at, ctxs = append(jobs, j), append(at, i), append(ctxs, bt.ctxs[i])
		}
	}
	bt.errs = make([]error, len(bt.jobs))
	if len(jobs) == 0 {
		return
	}
	ctx, cancel := allDone(ctxs)
	defer cancel()
	errs := b.call(ctx, jobs)
	if len(errs) != len(jobs) {
		err := fmt.Errorf("handler.Batch: the batch function returned %d outcomes for %d jobs", len(errs), len(jobs))
		for _, i := range at {
			bt.errs[i] = err
		}
		return
	}
	for k, i := range at {
		bt.errs[i] = errs[k]
	}
}

// call runs fn, a panic becoming every job's error (the worker's own
// recovery would see it on one job only).
func (b *Batcher) call(ctx context.Context, jobs []*Job) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			err := Permanent(fmt.Errorf("handler.Batch: the batch function panicked: %v", r))
			errs = make([]error, len(jobs))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	return b.fn(ctx, jobs)
}

// allDone returns a context with the values of ctxs[0] that is cancelled
// once every one of ctxs is done.
func allDone(ctxs []context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(ctxs[0]))
	var mu sync.Mutex
	left := len(ctxs)
	stops := make([]func() bool, 0, len(ctxs))
	for _, c := range ctxs {
		c := c
		stops = append(stops, context.AfterFunc(c, func() {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				cancel(context.Cause(c))
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(context.Canceled)
	}
}
