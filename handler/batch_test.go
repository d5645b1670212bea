package handler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shareq/shareq/handler"
)

// calls records each call of a batch function: the offsets it got.
type calls struct {
	mu  sync.Mutex
	got [][]int64
}

func (c *calls) fn(outcome func(*handler.Job) error) handler.BatchFunc {
	return func(_ context.Context, jobs []*handler.Job) []error {
		offs := make([]int64, len(jobs))
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			offs[i] = j.Offset
			errs[i] = outcome(j)
		}
		c.mu.Lock()
		c.got = append(c.got, offs)
		c.mu.Unlock()
		return errs
	}
}

// handleAll calls h for jobs of offsets offs at once, each on its own
// goroutine, and returns each job's outcome by offset.
func handleAll(ctx context.Context, h handler.Handler, offs ...int64) map[int64]error {
	var mu sync.Mutex
	out := map[int64]error{}
	var wg sync.WaitGroup
	for _, o := range offs {
		wg.Go(func() {
			err := h.Handle(ctx, &handler.Job{Topic: "t", Offset: o})
			mu.Lock()
			out[o] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// Jobs that come together run in one call of up to size; each call of
// Handle returns its own job's outcome.
func TestBatchRunsJobsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		bad := errors.New("bad row")
		h := handler.Batch(3, time.Second, c.fn(func(j *handler.Job) error {
			if j.Offset == 2 {
				return bad
			}
			return nil
		}))
		start := time.Now()
		out := handleAll(t.Context(), h, 1, 2, 3)
		if d := time.Since(start); d != 0 {
			t.Errorf("a full batch ran after %v, want at once", d)
		}
		if len(c.got) != 1 || len(c.got[0]) != 3 {
			t.Fatalf("calls %v, want one of 3 jobs", c.got)
		}
		if out[1] != nil || !errors.Is(out[2], bad) || out[3] != nil {
			t.Errorf("outcomes %v, want only job 2's error", out)
		}
	})
}

// A job waits for company at most wait, then runs with the jobs that came.
func TestBatchWaitBoundsTheFirstJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		h := handler.Batch(10, 200*time.Millisecond, c.fn(func(*handler.Job) error { return nil }))
		start := time.Now()
		out := handleAll(t.Context(), h, 1, 2)
		if d := time.Since(start); d != 200*time.Millisecond {
			t.Errorf("a batch of 2 of 10 ran after %v, want the wait, 200ms", d)
		}
		if len(c.got) != 1 || len(c.got[0]) != 2 || out[1] != nil || out[2] != nil {
			t.Errorf("calls %v, outcomes %v: want one call of both, both nil", c.got, out)
		}
	})
}

// More jobs than size make several calls, none above size.
func TestBatchSplitsAtSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		h := handler.Batch(4, 50*time.Millisecond, c.fn(func(*handler.Job) error { return nil }))
		offs := make([]int64, 10)
		for i := range offs {
			offs[i] = int64(i)
		}
		out := handleAll(t.Context(), h, offs...)
		var all []int64
		for _, call := range c.got {
			if len(call) > 4 {
				t.Errorf("a call of %d jobs, want at most 4", len(call))
			}
			all = append(all, call...)
		}
		slices.Sort(all)
		if !slices.Equal(all, offs) || len(out) != 10 {
			t.Errorf("jobs handled %v, want each of %v once", all, offs)
		}
	})
}

// A job whose context ends while it waits leaves the batch with its
// context's error and is not handed to the function; the others run.
func TestBatchJobCancelledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c calls
		h := handler.Batch(3, time.Second, c.fn(func(*handler.Job) error { return nil }))
		ctx, cancel := context.WithCancel(t.Context())
		var gone error
		var wg sync.WaitGroup
		wg.Go(func() { gone = h.Handle(ctx, &handler.Job{Offset: 9}) })
		synctest.Wait()
		cancel()
		wg.Wait()
		if !errors.Is(gone, context.Canceled) {
			t.Errorf("cancelled job's outcome %v, want context.Canceled", gone)
		}
		out := handleAll(t.Context(), h, 1, 2, 3)
		if len(c.got) != 1 || slices.Contains(c.got[0], 9) || out[1] != nil {
			t.Errorf("calls %v, outcomes %v: want one call of 1, 2, 3", c.got, out)
		}
	})
}

// A function that returns the wrong number of outcomes, or panics, fails
// every job of its batch, each with an error that says so.
func TestBatchFunctionMisbehaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		short := handler.Batch(2, time.Second, func(context.Context, []*handler.Job) []error { return []error{nil} })
		for o, err := range handleAll(t.Context(), short, 1, 2) {
			if err == nil || fmt.Sprint(err) != "handler.Batch: the batch function returned 1 outcomes for 2 jobs" {
				t.Errorf("job %d of a short answer: %v", o, err)
			}
		}
		panicky := handler.Batch(2, time.Second, func(context.Context, []*handler.Job) []error { panic("boom") })
		for o, err := range handleAll(t.Context(), panicky, 1, 2) {
			if !handler.IsPermanent(err) {
				t.Errorf("job %d of a panicking function: %v, want a permanent failure", o, err)
			}
		}
	})
}

// The function's context ends once every job's context has ended, not at
// the first.
func TestBatchContextEndsWithTheLastJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctxs := make([]context.Context, 2)
		cancels := make([]context.CancelFunc, 2)
		for i := range ctxs {
			ctxs[i], cancels[i] = context.WithCancel(t.Context())
		}
		entered := make(chan context.Context)
		release := make(chan struct{})
		h := handler.Batch(2, time.Second, func(ctx context.Context, jobs []*handler.Job) []error {
			entered <- ctx
			<-release
			return make([]error, len(jobs))
		})
		var wg sync.WaitGroup
		for i := range ctxs {
			wg.Go(func() { _ = h.Handle(ctxs[i], &handler.Job{Offset: int64(i)}) })
		}
		fctx := <-entered
		cancels[0]()
		synctest.Wait()
		if fctx.Err() != nil {
			t.Errorf("the batch's context ended with the first job's")
		}
		cancels[1]()
		synctest.Wait()
		if fctx.Err() == nil {
			t.Errorf("the batch's context still open after every job's ended")
		}
		close(release)
		wg.Wait()
	})
}

// One Batcher given to two topics gathers each topic's jobs apart: a call
// never mixes them.
func TestBatchKeepsTopicsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		h := handler.Batch(2, time.Second, func(_ context.Context, jobs []*handler.Job) []error {
			topics := ""
			for _, j := range jobs {
				topics += j.Topic
			}
			mu.Lock()
			got = append(got, topics)
			mu.Unlock()
			return make([]error, len(jobs))
		})
		var wg sync.WaitGroup
		for _, topic := range []string{"a", "b", "a", "b"} {
			wg.Go(func() {
				if err := h.Handle(t.Context(), &handler.Job{Topic: topic}); err != nil {
					t.Errorf("Handle: %v", err)
				}
			})
		}
		wg.Wait()
		slices.Sort(got)
		if fmt.Sprint(got) != "[aa bb]" {
			t.Errorf("calls by topic %v, want [aa bb]", got)
		}
	})
}
