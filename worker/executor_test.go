package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/internal/member"
)

// The executor's tests run inside synctest bubbles against a fakeMember:
// the test plays the share-group member, a ctl handler lets it end each
// job when it wants, and time (locks, backoffs, MaxHold, the shutdown
// timeout) is the bubble's fake clock.

var errRetryX = errors.New("try again later")

// ctl is a handler whose jobs end when the test says (finish), or when
// their context is cancelled (unless ignoreCancel).
type ctl struct {
	ignoreCancel bool

	mu       sync.Mutex
	outcome  map[int64]chan error
	ctxs     map[int64][]context.Context
	started  []int64
	counts   map[int64][]int32 // delivery counts each start saw
	running  int
	max      int
	finished int
}

func newCtl() *ctl {
	return &ctl{outcome: map[int64]chan error{}, ctxs: map[int64][]context.Context{}, counts: map[int64][]int32{}}
}

func (c *ctl) ch(off int64) chan error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.outcome[off]
	if ch == nil {
		ch = make(chan error, 1)
		c.outcome[off] = ch
	}
	return ch
}

func (c *ctl) Handle(ctx context.Context, j *handler.Job) error {
	ch := c.ch(j.Offset)
	c.mu.Lock()
	c.running++
	c.max = max(c.max, c.running)
	c.started = append(c.started, j.Offset)
	c.ctxs[j.Offset] = append(c.ctxs[j.Offset], ctx)
	c.counts[j.Offset] = append(c.counts[j.Offset], j.DeliveryCount)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running--
		c.finished++
		c.mu.Unlock()
	}()
	if c.ignoreCancel {
		return <-ch
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// finish ends the job of offset off with err and lets the executor settle.
func (c *ctl) finish(off int64, err error) {
	c.ch(off) <- err
	synctest.Wait()
}

func (c *ctl) startedList() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.started...)
}

func (c *ctl) countsOf(off int64) []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int32(nil), c.counts[off]...)
}

// cause returns the cancellation cause of the n-th run of offset off.
func (c *ctl) cause(off int64, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ctxs[off]) <= n {
		return errors.New("never started")
	}
	return context.Cause(c.ctxs[off][n])
}

func (c *ctl) stats() (running, maxRunning int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running, c.max
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu        sync.Mutex
	started   []int64
	finished  map[int64][]Result
	renewErrs []error // one per LockRenewed, nil for a success
	ackFailed []error
}

func newRecorder() *recorder { return &recorder{finished: map[int64][]Result{}} }

func (r *recorder) JobStarted(j *handler.Job) {
	r.mu.Lock()
	r.started = append(r.started, j.Offset)
	r.mu.Unlock()
}

func (r *recorder) JobFinished(j *handler.Job, res Result) {
	r.mu.Lock()
	r.finished[j.Offset] = append(r.finished[j.Offset], res)
	r.mu.Unlock()
}

func (r *recorder) LockRenewed(_ *handler.Job, err error) {
	r.mu.Lock()
	r.renewErrs = append(r.renewErrs, err)
	r.mu.Unlock()
}

func (r *recorder) AckFailed(_ string, _ int32, err error) {
	r.mu.Lock()
	r.ackFailed = append(r.ackFailed, err)
	r.mu.Unlock()
}

// startedList returns the offsets of JobStarted calls, in order.
func (r *recorder) startedList() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.started...)
}

func (r *recorder) results(off int64) []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Result(nil), r.finished[off]...)
}

func (r *recorder) renewals() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.renewErrs...)
}

// xbundle is one executor under test with its fake member, handler and
// observer.
type xbundle struct {
	x      *executor
	f      *fakeMember
	h      *ctl
	obs    *recorder
	cancel context.CancelFunc
	ran    chan struct{}            // closed when run returns
	down   atomic.Pointer[[]string] // what the executor last published with DependenciesDown
}

// testExecutorConfig is the executor's config for opts, as a Worker would
// build it, with delivery limit 5 and the pause published to b.
func testExecutorConfig(t testing.TB, b *xbundle, opts ...Option) executorConfig {
	t.Helper()
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs, timeouts, _, _ := cfg.handlers()
	c := newExecutorConfig(cfg, hs, timeouts)
	c.DeliveryLimit = func() int32 { return 5 }
	c.DependenciesDown = func(deps []string) {
		if b == nil {
			return
		}
		if deps == nil {
			b.down.Store(nil)
			return
		}
		b.down.Store(&deps)
	}
	return c
}

// dependenciesDown is what Worker.DependenciesDown would return.
func (b *xbundle) dependenciesDown() []string {
	if p := b.down.Load(); p != nil {
		return append([]string(nil), (*p)...)
	}
	return nil
}

// startExecutor runs an executor for topic "t" (delivery limit 5) inside
// the current bubble; the test must stop it (stop, or the member failing)
// before the bubble ends.
func startExecutor(t *testing.T, h handler.Handler, f *fakeMember, opts ...Option) *xbundle {
	t.Helper()
	return startExecutorWith(t, h, f, nil, opts...)
}

// startExecutorWith is startExecutor with set applied to the executor's
// config (nil: nothing) before it starts.
func startExecutorWith(t *testing.T, h handler.Handler, f *fakeMember, set func(*executorConfig), opts ...Option) *xbundle {
	t.Helper()
	obs := newRecorder()
	if f == nil {
		f = newFakeMember()
	}
	c, _ := h.(*ctl)
	base := []Option{Brokers("fake:9092"), Group("g"), Handle("t", h), Observers(obs),
		Logger(slog.New(slog.DiscardHandler)), RetryBackoff(nil)}
	b := &xbundle{f: f, h: c, obs: obs, ran: make(chan struct{})}
	xc := testExecutorConfig(t, b, append(base, opts...)...)
	if set != nil {
		set(&xc)
	}
	b.x = newExecutor(xc, f)
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		defer close(b.ran)
		b.x.run(ctx)
	}()
	t.Cleanup(func() {
		// After a failed test: end the executor so the bubble can end.
		if b.returned() {
			return
		}
		cancel()
		f.mu.Lock()
		if !f.closed {
			f.closed = true
			close(f.events)
		}
		f.mu.Unlock()
		if c != nil {
			c.mu.Lock()
			for _, ch := range c.outcome {
				select {
				case ch <- errors.New("test over"):
				default:
				}
			}
			c.mu.Unlock()
		}
		<-b.ran
	})
	synctest.Wait()
	return b
}

// stop cancels run's context and waits for run to return, past the
// shutdown timeout if handlers still run.
func (b *xbundle) stop(t *testing.T) {
	t.Helper()
	b.cancel()
	synctest.Wait()
	if !b.returned() {
		time.Sleep(b.x.cfg.ShutdownTimeout)
		synctest.Wait()
	}
	select {
	case <-b.ran:
	default:
		t.Fatal("run did not return after its context was cancelled")
	}
}

func (b *xbundle) returned() bool {
	select {
	case <-b.ran:
		return true
	default:
		return false
	}
}

// only returns the single Result of offset off, failing unless there is
// exactly one.
func (b *xbundle) only(t *testing.T, off int64) Result {
	t.Helper()
	rs := b.obs.results(off)
	if len(rs) != 1 {
		t.Fatalf("offset %d: %d JobFinished calls (%+v), want 1", off, len(rs), rs)
	}
	return rs[0]
}

func wantAcks(t *testing.T, f *fakeMember, off int64, want ...member.AckType) {
	t.Helper()
	if got := f.acksOf(off); !slices.Equal(got, want) {
		t.Fatalf("offset %d acks %v, want %v", off, got, want)
	}
}

const lock = 30 * time.Second

func TestExecutorAcceptsRejectsReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(5))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 5, lock), delivery(5, 1, lock))
		h.finish(1, nil)
		h.finish(2, handler.Permanent(errors.New("bad payload")))
		h.finish(3, errRetryX)
		h.finish(4, errRetryX) // on its last delivery
		h.finish(5, handler.Retry("busy", errRetryX))

		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Reject)
		wantAcks(t, b.f, 3, member.Release)
		wantAcks(t, b.f, 4, member.Release)
		wantAcks(t, b.f, 5, member.Release)
		for _, tc := range []struct {
			off     int64
			ack     Ack
			outcome Outcome
			final   bool
		}{
			{1, AckAccept, OutcomeSucceeded, true},
			{2, AckReject, OutcomeDiscarded, true},
			{3, AckRelease, OutcomeRetried, false},
			{4, AckRelease, OutcomeDiscarded, true}, // the broker archives it
			{5, AckRelease, OutcomeRetried, false},
		} {
			r := b.only(t, tc.off)
			if r.Ack != tc.ack || r.Outcome != tc.outcome || r.Final != tc.final || !r.Ran || r.Parked != nil {
				t.Errorf("offset %d: %+v, want ack %v outcome %v final %v ran", tc.off, r, tc.ack, tc.outcome, tc.final)
			}
			if r.LockLeft != lock {
				t.Errorf("offset %d: LockLeft %v, want %v (no time passed)", tc.off, r.LockLeft, lock)
			}
		}
		if r := b.only(t, 3); !errors.Is(r.Err, errRetryX) {
			t.Errorf("released job's Err = %v, want the handler's", r.Err)
		}
		b.stop(t)
	})
}

// A job the dlq middleware parked (the chain returns a ParkedError, here
// wrapped by an outer middleware) is ACCEPTed and reported as parked,
// with the failure it was parked for, never as a success; the worker's
// log says so at Warn level. An outer middleware that replaces the error
// makes it that error's outcome.
func TestExecutorReportsParkedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cause := handler.Permanent(errors.New("bad address"))
		h := handler.Func(func(ctx context.Context, j *handler.Job) error {
			if j.Offset == 2 {
				return errRetryX // an outer middleware failed after the park
			}
			return fmt.Errorf("outer: %w", handler.Parked(handler.DeadLetter{Topic: "t.dlq", Partition: 0, Offset: 7, Reason: handler.ReasonPermanent, Err: cause}))
		})
		var logs logbuf.Buffer
		b := startExecutor(t, h, nil, Concurrency(2), Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Release)
		r := b.only(t, 1)
		if r.Outcome != OutcomeParked || r.Ack != AckAccept || !r.Final || !errors.Is(r.Err, cause) ||
			r.Parked == nil || r.Parked.Topic != "t.dlq" || r.Parked.Offset != 7 || r.Parked.Reason != handler.ReasonPermanent {
			t.Fatalf("parked job reported as %+v", r)
		}
		if r := b.only(t, 2); r.Outcome != OutcomeRetried || r.Parked != nil {
			t.Fatalf("failed job reported as %+v", r)
		}
		b.stop(t)
		out := logs.String()
		if !strings.Contains(out, "level=WARN msg=\"job parked in its dead-letter topic\" group=g outcome=parked ack=accept topic=t partition=0 offset=1") ||
			!strings.Contains(out, "dlq_topic=t.dlq dlq_partition=0 dlq_offset=7") {
			t.Errorf("log lacks the parked line: %s", out)
		}
	})
}

// A job the idempotency middleware found cancelled (the chain returns a
// CancelledError) is ACCEPTed and reported as cancelled, never as a
// success, with an Info line; an outer middleware that replaces the
// error makes it that error's outcome (a retry), and a plain job
// succeeds.
func TestExecutorReportsCancelledJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := handler.Func(func(ctx context.Context, j *handler.Job) error {
			switch j.Offset {
			case 1:
				return handler.Cancelled(errors.New("claim holds a cancel"))
			case 2:
				return errRetryX // an outer middleware failed after the cancel
			}
			return nil
		})
		var logs logbuf.Buffer
		b := startExecutor(t, h, nil, Concurrency(3), Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock))
		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Release)
		wantAcks(t, b.f, 3, member.Accept)
		if r := b.only(t, 1); r.Outcome != OutcomeCancelled || r.Ack != AckAccept || !r.Final || r.Err != nil || r.Parked != nil {
			t.Fatalf("cancelled job reported as %+v", r)
		}
		if r := b.only(t, 2); r.Outcome != OutcomeRetried {
			t.Fatalf("failed job with a cancel note reported as %+v", r)
		}
		if r := b.only(t, 3); r.Outcome != OutcomeSucceeded {
			t.Fatalf("plain job reported as %+v", r)
		}
		b.stop(t)
		out := logs.String()
		if !strings.Contains(out, `level=INFO msg="job cancelled; accepted without running" group=g outcome=cancelled ack=accept topic=t partition=0 offset=1`) {
			t.Errorf("log lacks the cancelled line: %s", out)
		}
	})
}

// A job timeout cancels the job's context with cause ErrJobTimeout at
// exactly the timeout; the error the handler returns then is a retry
// (reason timeout, wrapping ErrJobTimeout), held for the backoff; on the
// last delivery it is discarded. A permanent error stays permanent, and a
// handler that returns nil after the timeout succeeded.
func TestExecutorJobTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(4), JobTimeout(5*time.Second), RetryBackoff(func(int32) time.Duration { return 3 * time.Second }))
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock), delivery(2, 5, lock))
		synctest.Wait()
		time.Sleep(5*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := len(b.f.acksOf(1)) + len(b.f.acksOf(2)); got != 0 || h.cause(1, 0) != nil {
			t.Fatalf("before the timeout: %d acks, cause %v", got, h.cause(1, 0))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if c := h.cause(1, 0); c != ErrJobTimeout {
			t.Fatalf("context cause at the timeout %v, want ErrJobTimeout", c)
		}
		if time.Since(start) != 5*time.Second {
			t.Fatalf("timed out after %v", time.Since(start))
		}
		wantAcks(t, b.f, 2, member.Release) // last delivery: no backoff
		if r := b.only(t, 2); r.Outcome != OutcomeDiscarded || !errors.Is(r.Err, ErrJobTimeout) {
			t.Fatalf("timed out on the last delivery: %+v", r)
		}
		wantAcks(t, b.f, 1) // held for the backoff
		time.Sleep(3 * time.Second)
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Release)
		r := b.only(t, 1)
		if r.Outcome != OutcomeRetried || !errors.Is(r.Err, ErrJobTimeout) || handler.ReasonOf(r.Err) != handler.ReasonTimeout {
			t.Fatalf("timed-out job: %+v, want retried with ErrJobTimeout and reason timeout", r)
		}
		b.stop(t)
	})
	// Handlers that return after their timeout, ignoring the context: a
	// permanent error stays permanent, nil is a success.
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		h.ignoreCancel = true
		b := startExecutor(t, h, nil, Concurrency(2), JobTimeout(5*time.Second))
		b.f.deliver(delivery(3, 1, lock), delivery(4, 1, lock))
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if c := h.cause(3, 0); c != ErrJobTimeout {
			t.Fatalf("context cause after the timeout %v, want ErrJobTimeout", c)
		}
		h.finish(3, handler.Permanent(errors.New("bad")))
		h.finish(4, nil)
		wantAcks(t, b.f, 3, member.Reject)
		wantAcks(t, b.f, 4, member.Accept)
		if r := b.only(t, 3); errors.Is(r.Err, ErrJobTimeout) || r.Outcome != OutcomeDiscarded {
			t.Fatalf("permanent error after the timeout: %+v", r)
		}
		if r := b.only(t, 4); r.Outcome != OutcomeSucceeded || r.Err != nil {
			t.Fatalf("success after the timeout: %+v", r)
		}
		b.stop(t)
	})
}

func TestExecutorRejectsPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := handler.Func(func(context.Context, *handler.Job) error { panic("boom") })
		b := startExecutor(t, h, nil)
		b.f.deliver(delivery(1, 1, lock))
		wantAcks(t, b.f, 1, member.Reject)
		if r := b.only(t, 1); !handler.IsPermanent(r.Err) {
			t.Fatalf("panic reported as %v, want a permanent error", r.Err)
		}
		b.stop(t)
	})
}

// A panic in a middleware outside the handler's own recovery is caught by
// the worker: rejected as permanent, with the panic's value and stack (a
// dlq middleware further out parks it with them).
func TestExecutorKeepsStackOfPanicInMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := handler.Func(func(context.Context, *handler.Job) error { return nil })
		outer := func(handler.Handler) handler.Handler {
			return handler.Func(func(context.Context, *handler.Job) error { panic("middleware bug") })
		}
		b := startExecutor(t, h, nil, Use(outer))
		b.f.deliver(delivery(1, 1, lock))
		wantAcks(t, b.f, 1, member.Reject)
		var pe *handler.PanicError
		r := b.only(t, 1)
		if !handler.IsPermanent(r.Err) || !errors.As(r.Err, &pe) || pe.Value != "middleware bug" || !strings.Contains(string(pe.Stack), "executor_test.go") {
			t.Fatalf("panic reported as %v, want a permanent PanicError with the middleware's value and stack", r.Err)
		}
		b.stop(t)
	})
}

// A handler that asks for its own delay (handler.RetryAfter, a 429's
// Retry-After) is held that long instead of the worker's backoff, even
// with RetryBackoff(nil); never past MaxHold − 1 s, and not on the last
// delivery.
func TestExecutorHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2), RetryBackoff(nil), MaxHold(time.Minute))
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock))
		h.finish(1, handler.RetryAfter(7*time.Second, errRetryX))
		time.Sleep(7*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("released %v before the 7 s the handler asked for", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Release)
		if r := b.only(t, 1); !errors.Is(r.Err, errRetryX) || time.Since(start) != 7*time.Second {
			t.Fatalf("released with %+v after %v", r, time.Since(start))
		}

		// Capped at MaxHold − 1 s from the job's start.
		start = time.Now()
		b.f.deliver(delivery(2, 1, lock))
		h.finish(2, handler.RetryAfter(time.Hour, errRetryX))
		for len(b.f.acksOf(2)) == 0 {
			time.Sleep(time.Second)
			b.f.answerRenewals(lock, nil)
			synctest.Wait()
		}
		if held := time.Since(start); held > time.Minute-time.Second {
			t.Fatalf("held %v, want at most MaxHold − 1 s", held)
		}

		// None on the last delivery.
		b.f.deliver(delivery(3, 5, lock))
		h.finish(3, handler.RetryAfter(time.Minute, errRetryX))
		wantAcks(t, b.f, 3, member.Release)
		b.stop(t)
	})
}

// Every job's context carries the worker's logger (handler.Logger), which
// middleware built without one log through.
func TestExecutorGivesJobsTheWorkersLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		want := slog.New(slog.DiscardHandler)
		got := make(chan *slog.Logger, 1)
		h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
			got <- handler.Logger(ctx)
			return nil
		})
		b := startExecutor(t, h, nil, Logger(want))
		b.f.deliver(delivery(1, 1, lock))
		wantAcks(t, b.f, 1, member.Accept)
		if l := <-got; l != want {
			t.Error("the handler's context carries another logger than worker.Logger's")
		}
		b.stop(t)
	})
}

func TestExecutorHoldsRetryForBackoffThenReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		backoff := func(n int32) time.Duration { return time.Duration(n) * 10 * time.Second }
		b := startExecutor(t, h, nil, Concurrency(1), RetryBackoff(backoff), MaxHold(time.Minute))
		start := time.Now()
		b.f.deliver(delivery(1, 2, lock))
		h.finish(1, errRetryX)
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("released at once (%v), want held for 20s", got)
		}
		if got := b.f.grantList(); !slices.Equal(got, []int{1, 1}) {
			t.Fatalf("grants %v: the held job must give its slot back", got)
		}
		// The slot is free: another job runs while 1 is held.
		b.f.deliver(delivery(2, 1, lock))
		h.finish(2, nil)
		wantAcks(t, b.f, 2, member.Accept)

		// Its lock is renewed while it is held (half the 30 s lock).
		time.Sleep(15*time.Second - time.Since(start))
		synctest.Wait()
		if got := b.f.renewedKeys(); !slices.Equal(got, []member.Key{key(1)}) {
			t.Fatalf("renewed %v at 15s, want [t/0@1]", got)
		}
		b.f.answerRenewals(lock, nil)
		time.Sleep(20*time.Second - time.Since(start) - time.Nanosecond)
		synctest.Wait()
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("released before the backoff ended: %v", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Release)
		if r := b.only(t, 1); r.Ack != AckRelease || !errors.Is(r.Err, errRetryX) || !r.Ran || r.Final {
			t.Fatalf("held job finished with %+v", r)
		}

		// On its last delivery a failure is released at once.
		b.f.deliver(delivery(3, 5, lock))
		h.finish(3, errRetryX)
		wantAcks(t, b.f, 3, member.Release)
		if r := b.only(t, 3); !r.Final {
			t.Fatalf("release on the last delivery not Final: %+v", r)
		}

		// The backoff never runs past MaxHold − 1 s from the job's start.
		b.f.deliver(delivery(4, 4, lock)) // backoff 40 s
		time.Sleep(30 * time.Second)
		b.f.answerRenewals(lock, nil)
		h.finish(4, errRetryX)
		time.Sleep(29*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := b.f.acksOf(4); len(got) != 0 {
			t.Fatalf("released before MaxHold − 1 s: %v", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAcks(t, b.f, 4, member.Release)
		b.stop(t)
	})
}

func TestExecutorRenewsLongJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, RenewMargin(2*time.Second))
		const lock = 10 * time.Second
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock))
		var at []time.Duration
		for time.Since(start) < 35*time.Second {
			time.Sleep(time.Second)
			synctest.Wait()
			if b.f.answerRenewals(lock, nil) > 0 {
				at = append(at, time.Since(start))
			}
		}
		// Renewed 2 s before each deadline; each renewal's reported
		// deadline (now + 10 s) is the next one.
		if want := []time.Duration{8 * time.Second, 16 * time.Second, 24 * time.Second, 32 * time.Second}; !slices.Equal(at, want) {
			t.Fatalf("renewed at %v, want %v", at, want)
		}
		if got := b.obs.renewals(); len(got) != 4 || slices.ContainsFunc(got, func(e error) bool { return e != nil }) {
			t.Fatalf("LockRenewed calls %v, want 4 successes", got)
		}
		h.finish(1, nil)
		wantAcks(t, b.f, 1, member.Accept)
		if r := b.only(t, 1); r.LockLeft != 7*time.Second || r.Duration != 35*time.Second {
			t.Fatalf("finished with %+v, want 7s left on the lock after 35s", r)
		}
		b.stop(t)
	})
}

// TestExecutorTracksOnlyJobsThatRunLong: a job that ends before its lock
// needs renewing never reaches the tracker (trackLater: its map was a
// few per cent of a short job's CPU), and one that runs long reaches it
// before its renewal is due, which comes on time.
func TestExecutorTracksOnlyJobsThatRunLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(4))
		// counts reads the executor's state while it waits, then has it
		// take an empty event, so that what it does next comes after the
		// reads (for the race detector).
		counts := func() (tracked, young int) {
			tracked, young = b.x.tracker.Len(), len(b.x.young)
			b.f.push(member.Event{})
			return tracked, young
		}
		for off := int64(1); off <= 3; off++ {
			b.f.deliver(delivery(off, 1, lock))
		}
		synctest.Wait()
		if n, y := counts(); n != 0 || y != 3 {
			t.Fatalf("3 jobs just started: %d in the tracker, %d young; want 0 and 3", n, y)
		}
		for off := int64(1); off <= 2; off++ {
			h.finish(off, nil)
			wantAcks(t, b.f, off, member.Accept)
		}
		if n, y := counts(); n != 0 || y != 1 {
			t.Fatalf("2 of them ended: %d in the tracker, %d young; want 0 and 1", n, y)
		}
		// Job 3 runs on: with a 30 s lock the young jobs are looked at
		// each second, and it goes to the tracker two passes before its
		// renewal is due at 15 s.
		time.Sleep(12 * time.Second)
		synctest.Wait()
		if n, y := counts(); n != 0 || y != 1 {
			t.Fatalf("at 12 s: %d in the tracker, %d young; want 0 and 1", n, y)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n, y := counts(); n != 1 || y != 0 {
			t.Fatalf("at 14 s: %d in the tracker, %d young; want 1 and 0", n, y)
		}
		if b.f.answerRenewals(lock, nil) != 0 {
			t.Fatal("renewed before 15 s")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if b.f.answerRenewals(lock, nil) != 1 {
			t.Fatal("not renewed at 15 s")
		}
		h.finish(3, nil)
		wantAcks(t, b.f, 3, member.Accept)
		if n, y := counts(); n != 0 || y != 0 {
			t.Fatalf("all ended: %d in the tracker, %d young; want 0 and 0", n, y)
		}
		b.stop(t)
	})
}

func TestExecutorAbandonsAtMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		h.ignoreCancel = true
		b := startExecutor(t, h, nil, MaxHold(time.Minute), Concurrency(1))
		b.f.deliver(delivery(1, 1, lock))
		for range 3 { // renewals at 15, 30 and 45 s
			time.Sleep(15 * time.Second)
			synctest.Wait()
			if b.f.answerRenewals(lock, nil) != 1 {
				t.Fatal("lock not renewed")
			}
		}
		time.Sleep(15*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("acknowledged before MaxHold: %v", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Release)
		if err := h.cause(1, 0); !errors.Is(err, ErrMaxHold) {
			t.Fatalf("context cause %v, want ErrMaxHold", err)
		}
		if r := b.only(t, 1); r.Ack != AckRelease || !errors.Is(r.Err, ErrMaxHold) || !r.Ran || r.Duration != time.Minute {
			t.Fatalf("finished with %+v", r)
		}
		// The abandoned handler keeps its slot until it returns; what it
		// returns is discarded.
		if got := b.f.grantList(); !slices.Equal(got, []int{1}) {
			t.Fatalf("grants %v while the abandoned handler runs, want [1]", got)
		}
		h.finish(1, nil)
		wantAcks(t, b.f, 1, member.Release)
		b.only(t, 1)
		if got := b.f.grantList(); !slices.Equal(got, []int{1, 1}) {
			t.Fatalf("grants %v after the abandoned handler returned, want [1 1]", got)
		}
		b.stop(t)
	})
}

func TestExecutorReleasesHeldJobAtMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		f := newFakeMember()
		f.manualQuiet = true
		b := startExecutor(t, h, f, MaxHold(time.Minute), ShutdownTimeout(time.Hour))
		start := time.Now()
		b.f.deliver(delivery(1, 1, 20*time.Minute))
		b.cancel()
		synctest.Wait()
		h.finish(1, errRetryX) // failing while stopping: held until quiet
		if got := f.acksOf(1); len(got) != 0 {
			t.Fatalf("released before quiet: %v", got)
		}
		time.Sleep(time.Minute - time.Since(start))
		synctest.Wait()
		wantAcks(t, f, 1, member.Release)
		if r := b.only(t, 1); !errors.Is(r.Err, errRetryX) || !r.Ran {
			t.Fatalf("held job finished at MaxHold with %+v", r)
		}
		f.closeQuiet()
		if !b.returned() {
			t.Fatal("run did not return once quiet")
		}
	})
}

func TestExecutorRenewFailurePastDeadlineAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil)
		const lock = 10 * time.Second
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock))
		time.Sleep(5 * time.Second) // half the lock
		synctest.Wait()
		broken := errors.New("coordinator moved")
		b.f.answerRenewals(lock, broken)
		time.Sleep(renewRetry) // retried 250 ms later
		synctest.Wait()
		if got := b.f.renewedKeys(); len(got) != 2 {
			t.Fatalf("renewals %v, want a retry 250ms after the failure", got)
		}
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("abandoned while the lock still ran: %v", got)
		}
		time.Sleep(lock - time.Since(start))
		b.f.answerRenewals(lock, broken) // fails again, past the deadline
		wantAcks(t, b.f, 1, member.Release)
		if err := h.cause(1, 0); !errors.Is(err, ErrLockLost) {
			t.Fatalf("context cause %v, want ErrLockLost", err)
		}
		if r := b.only(t, 1); !errors.Is(r.Err, ErrLockLost) || r.Ack != AckRelease {
			t.Fatalf("finished with %+v", r)
		}
		if got := b.obs.renewals(); len(got) != 2 || !errors.Is(got[0], broken) || !errors.Is(got[1], broken) {
			t.Fatalf("LockRenewed calls %v, want two failures", got)
		}
		b.stop(t)
	})
}

func TestExecutorDoesNotStartExpiredLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1))
		// 100 ms left: less than min(500 ms, lock/4).
		d := delivery(1, 1, lock)
		d.Deadline = time.Now().Add(100 * time.Millisecond)
		b.f.deliver(d)
		if got := h.startedList(); len(got) != 0 {
			t.Fatalf("started %v", got)
		}
		wantAcks(t, b.f, 1, member.Release)
		if r := b.only(t, 1); r.Ack != AckRelease || r.Outcome != OutcomeInterrupted || !errors.Is(r.Err, ErrLockExpired) || r.Ran || r.Final {
			t.Fatalf("finished with %+v", r)
		}
		if got := b.f.credit(); got != 1 {
			t.Fatalf("credit %d after the release, want it back (1)", got)
		}

		// A job whose lock runs out while it waits for a slot, its
		// renewals failing, is released when its turn comes. Lock 2 s:
		// the start margin is 500 ms.
		b.f.deliver(delivery(2, 1, lock))
		time.Sleep(time.Second)
		b.f.setStats(member.Stats{})
		b.f.push(member.Event{Deliveries: []member.Delivery{delivery(3, 1, 2*time.Second)}})
		time.Sleep(1600 * time.Millisecond)
		synctest.Wait()
		if n := b.f.answerRenewals(2*time.Second, errors.New("not the leader")); n == 0 {
			t.Fatal("the queued job's lock was not renewed while it waited")
		}
		h.finish(2, nil)
		wantAcks(t, b.f, 3, member.Release)
		if r := b.only(t, 3); !errors.Is(r.Err, ErrLockExpired) || r.Ran {
			t.Fatalf("queued job finished with %+v", r)
		}
		if got := h.startedList(); !slices.Equal(got, []int64{2}) {
			t.Fatalf("started %v, want [2]", got)
		}
		b.stop(t)
	})
}

// A record that waits for a slot longer than its lock keeps its lock:
// the executor renews it while it waits (jobs ahead of it turned slow),
// and it runs on the delivery it came with.
func TestExecutorRenewsQueuedLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1))
		const short = 2 * time.Second
		b.f.deliver(delivery(1, 1, short))
		b.f.setStats(member.Stats{})
		b.f.deliver(delivery(2, 1, short), delivery(3, 1, short))
		// Job 1 runs three locks; 2 and 3 wait behind it, renewed.
		for range 6 {
			time.Sleep(short / 2)
			synctest.Wait()
			b.f.answerRenewals(short, nil)
		}
		if got := h.startedList(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("started %v, want [1]", got)
		}
		renewed := map[member.Key]int{}
		for _, k := range b.f.renewedKeys() {
			renewed[k]++
		}
		if renewed[key(2)] < 2 || renewed[key(3)] < 2 {
			t.Fatalf("renewals %v, want the queued jobs 2 and 3 renewed while they waited", renewed)
		}
		h.finish(1, nil)
		synctest.Wait()
		if got := h.startedList(); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("started %v, want [1 2]", got)
		}
		h.finish(2, nil)
		h.finish(3, nil)
		for off := int64(1); off <= 3; off++ {
			wantAcks(t, b.f, off, member.Accept)
			if r := b.only(t, off); r.Outcome != OutcomeSucceeded || !r.Ran {
				t.Fatalf("job %d finished with %+v, want it run and succeeded", off, r)
			}
		}
		b.stop(t)
	})
}

func TestExecutorRunsExpiredLockOnLastDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil)
		d := delivery(1, 5, lock) // the last delivery
		d.Deadline = time.Now().Add(100 * time.Millisecond)
		b.f.deliver(d)
		if got := h.startedList(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("started %v, want [1]", got)
		}
		if got := b.f.renewedKeys(); !slices.Equal(got, []member.Key{key(1)}) {
			t.Fatalf("renewed %v, want [t/0@1] at once", got)
		}
		b.f.answerRenewals(lock, nil)
		h.finish(1, nil)
		wantAcks(t, b.f, 1, member.Accept)
		if r := b.only(t, 1); !r.Ran || r.Ack != AckAccept || r.LockLeft != lock {
			t.Fatalf("finished with %+v", r)
		}
		b.stop(t)
	})
}

func TestExecutorSameOffsetDeliveredAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2), RetryBackoff(func(int32) time.Duration { return time.Minute }))
		start := time.Now()

		// Running: the lock ran out (renewal lost) and the member fetched
		// the record again.
		b.f.deliver(delivery(1, 1, lock))
		time.Sleep(40 * time.Second)
		b.f.deliver(delivery(1, 2, lock))
		if got := h.startedList(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("started %v: a second job for a running offset", got)
		}
		if got := b.f.credit(); got != 1 {
			t.Fatalf("credit %d after the redelivery, want it back (1)", got)
		}
		// The new deadline holds: 70 s, renewed at 55 s.
		b.f.answerRenewals(lock, errors.New("lost"))
		time.Sleep(55*time.Second - time.Since(start))
		synctest.Wait()
		b.f.answerRenewals(lock, nil)
		h.finish(1, nil)
		wantAcks(t, b.f, 1, member.Accept)
		if r := b.only(t, 1); r.LockLeft != lock {
			t.Fatalf("finished with %+v, want the renewed lock", r)
		}

		// Queued (3 is a prefetched record waiting for a slot): the
		// waiting job takes the new delivery's count.
		b.f.deliver(delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 1, lock))
		b.f.deliver(delivery(4, 2, lock))
		h.finish(2, nil)
		if got := h.countsOf(4); !slices.Equal(got, []int32{2}) {
			t.Fatalf("offset 4 ran with delivery counts %v, want [2]", got)
		}
		h.finish(3, nil)
		h.finish(4, nil)

		// Held for retry: the hold goes on, one release at its end.
		b.f.deliver(delivery(5, 1, lock))
		h.finish(5, errRetryX)
		time.Sleep(10 * time.Second)
		b.f.deliver(delivery(5, 2, lock))
		if got := h.countsOf(5); len(got) != 1 {
			t.Fatalf("offset 5 ran %d times while held", len(got))
		}
		for range 4 {
			time.Sleep(15 * time.Second)
			b.f.answerRenewals(lock, nil)
		}
		wantAcks(t, b.f, 5, member.Release)
		if r := b.only(t, 5); r.Final {
			t.Fatalf("held job finished with %+v", r)
		}
		for _, off := range []int64{1, 2, 3, 4, 5} {
			b.only(t, off)
		}
		if got := b.f.grantList(); slices.Contains(got, 0) {
			t.Fatalf("grants %v", got)
		}
		b.stop(t)
	})
}

func TestExecutorLostLockCancelsJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2), RetryBackoff(func(int32) time.Duration { return time.Minute }))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		h.finish(2, errRetryX) // held
		b.f.deliver(delivery(3, 1, lock))
		b.f.deliver(delivery(4, 1, lock)) // queued behind 1 and 3
		b.f.push(member.Event{Lost: []member.Key{key(1), key(2), key(4)}})

		if err := h.cause(1, 0); !errors.Is(err, ErrLockLost) {
			t.Fatalf("running job's context cause %v, want ErrLockLost", err)
		}
		for _, off := range []int64{1, 2, 4} {
			if got := b.f.acksOf(off); len(got) != 0 {
				t.Fatalf("offset %d acknowledged (%v) after its lock was lost", off, got)
			}
			r := b.only(t, off)
			if r.Ack != AckRelease || !errors.Is(r.Err, ErrLockLost) || r.Ran != (off != 4) {
				t.Fatalf("offset %d finished with %+v", off, r)
			}
		}
		if got := b.obs.startedList(); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("started %v: the lost queued job must not run", got)
		}

		// Lost and delivered again in one event: a new job.
		h.finish(3, nil)
		b.f.push(member.Event{Lost: []member.Key{key(5)}})
		b.f.deliver(delivery(1, 2, lock))
		if got := h.countsOf(1); !slices.Equal(got, []int32{1, 2}) {
			t.Fatalf("offset 1 ran with counts %v, want [1 2]", got)
		}
		h.finish(1, nil)
		wantAcks(t, b.f, 1, member.Accept)
		if rs := b.obs.results(1); len(rs) != 2 || rs[1].Ack != AckAccept {
			t.Fatalf("offset 1 results %+v", rs)
		}
		b.stop(t)
	})
}

func TestExecutorNeverExceedsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		const conc = 3
		b := startExecutor(t, h, nil, Concurrency(conc))
		next := int64(0)
		for round := range 20 {
			if n := b.f.credit(); n > 0 {
				ds := make([]member.Delivery, n)
				for i := range ds {
					ds[i] = delivery(next, 1, lock)
					next++
				}
				b.f.deliver(ds...)
			}
			if running, _ := h.stats(); running > conc {
				t.Fatalf("round %d: %d handlers running", round, running)
			}
			// End the oldest running job.
			started := h.startedList()
			h.finish(started[round], nil)
		}
		if _, most := h.stats(); most != conc {
			t.Fatalf("at most %d handlers ran at once, want %d", most, conc)
		}
		b.stop(t)
	})
}

func TestExecutorQueuesDeliveriesBeyondFreeSlotsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2))
		// A member may deliver more than there are free slots (prefetch).
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 1, lock))
		if got := b.obs.startedList(); !slices.Equal(got, []int64{1, 2}) {
			t.Fatalf("started %v, want [1 2]", got)
		}
		h.finish(2, nil)
		h.finish(1, nil)
		if got := b.obs.startedList(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
			t.Fatalf("started %v, want the queue in delivery order", got)
		}
		h.finish(3, nil)
		h.finish(4, nil)
		b.stop(t)
	})
}

func TestExecutorGrantsCreditAsSlotsFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2))
		if got := b.f.grantList(); !slices.Equal(got, []int{2}) {
			t.Fatalf("grants at start %v, want [2] (Concurrency)", got)
		}
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		if got := b.f.grantList(); !slices.Equal(got, []int{2}) {
			t.Fatalf("grants %v with every slot busy, want none more", got)
		}
		h.finish(1, nil)
		if got := b.f.grantList(); !slices.Equal(got, []int{2, 1}) {
			t.Fatalf("grants %v after a job ended, want one more", got)
		}
		b.f.deliver(delivery(3, 1, lock))
		h.finish(2, nil)
		h.finish(3, nil)
		if got := b.f.grantList(); !slices.Equal(got, []int{2, 1, 1, 1}) {
			t.Fatalf("grants %v", got)
		}
		// Once stopping, no more credit.
		b.stop(t)
		if got := b.f.grantList(); !slices.Equal(got, []int{2, 1, 1, 1}) {
			t.Fatalf("grants %v after the stop", got)
		}
	})
}

// A member may deliver past the credit (a whole producer batch in a
// batch_optimized fetch): the records run, and the credit they took
// beyond the grant is a debt that the jobs ending repay before the
// member may fetch again.
func TestExecutorRepaysCreditDebtBeforeFetchingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(2))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 1, lock), delivery(5, 1, lock))
		if got := b.f.credit(); got != -3 {
			t.Fatalf("credit %d after 5 deliveries on a grant of 2, want -3", got)
		}
		for off := int64(1); off <= 3; off++ {
			h.finish(off, nil)
			if got := b.f.credit(); got > 0 {
				t.Fatalf("credit %d after %d of 5 jobs ended, want none until 3 have (2 slots)", got, off)
			}
		}
		h.finish(4, nil)
		if got := b.f.credit(); got != 1 {
			t.Fatalf("credit %d with one job in hand, want 1 (Concurrency 2)", got)
		}
		if got := b.obs.startedList(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
			t.Fatalf("started %v, want every delivery in order", got)
		}
		h.finish(5, nil)
		if got := b.f.credit(); got != 2 {
			t.Fatalf("credit %d with nothing in hand, want 2", got)
		}
		b.stop(t)
	})
}

func TestExecutorPrefetchFor(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		rate                 float64
		rtt, lock            time.Duration
		whole                int
		want, chunk, reserve int
	}{
		{"no rate yet", 0, 10 * time.Millisecond, lock, 0, 0, 0, 0},
		{"no round trip yet", 1000, 0, lock, 0, 0, 0, 0},
		{"four round trips of jobs", 1000, 10 * time.Millisecond, lock, 0, 40, 0, 0},
		{"rounded up", 1000, 10500 * time.Microsecond, lock, 0, 42, 0, 0},
		{"at least the horizon of jobs", 100000, 100 * time.Microsecond, lock, 0, 1000, 0, 0},
		{"long jobs: one record", 24, 5 * time.Millisecond, lock, 0, 1, 0, 0},
		{"a quarter lock of waiting at most", 100, time.Second, 2 * time.Second, 0, 50, 0, 0},
		{"beyond Concurrency", 10000, 10 * time.Millisecond, lock, 0, 400, 0, 0},
		{"at most prefetchMax", 1e6, 10 * time.Millisecond, lock, 0, prefetchMax, 0, 0},
		// Whole producer batches: 100,000 jobs/s and a 2 ms round trip
		// free 200 credits a round trip, and hold 1,000 (10 ms).
		{"a batch within a round trip's credit", 100000, 2 * time.Millisecond, lock, 200, 1000, 0, 0},
		{"a batch past it: held in chunks", 100000, 2 * time.Millisecond, lock, 9000, 10000, 9000, 1000},
		{"all of it within the horizon", 100000, 2 * time.Millisecond, lock, 9500, 10500, 9500, 1000},
		{"past the horizon: split", 100000, 2 * time.Millisecond, lock, 9501, 1000, 0, 0},
		{"past a quarter lock: split", 100000, 2 * time.Millisecond, 300 * time.Millisecond, 9000, 1000, 0, 0},
		{"short jobs, slowly: split", 1000, 2 * time.Millisecond, lock, 500, 10, 0, 0},
	} {
		got, chunk, reserve := prefetchFor(tc.rate, tc.rtt, tc.lock, tc.whole)
		if got != tc.want || chunk != tc.chunk || reserve != tc.reserve {
			t.Errorf("%s: prefetchFor(%v, %v, %v, %d) = %d, %d, %d, want %d, %d, %d", tc.name, tc.rate, tc.rtt, tc.lock, tc.whole,
				got, chunk, reserve, tc.want, tc.chunk, tc.reserve)
		}
	}
}

// With whole producer batches (prefetchFor's chunk), credit goes out a
// whole batch at a time, only once the last grant was used up, and not
// while reserve records are queued; without, whatever frees up.
func TestExecutorGrantsWholeBatches(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		chunk, reserve, slack        int
		running, queued, outstanding int
		want                         []int // the grants
	}{
		// Concurrency 10, prefetch 1,000 (a reserve of 500 and a chunk of 500).
		{"no chunk: what frees up", 0, 0, 0, 10, 900, 0, []int{100}},
		{"a chunk's worth frees up", 500, 500, 0, 10, 400, 0, []int{600}},
		{"less than a chunk, reserve queued: none", 500, 500, 0, 10, 600, 0, nil},
		{"a chunk's worth and one", 500, 500, 0, 10, 499, 0, []int{501}},
		{"less than a chunk, reserve gone: a chunk", 500, 601, 0, 10, 600, 0, []int{500}},
		{"a chunk on the way: none", 500, 500, 0, 10, 0, 1, nil},
		{"a debt: repaid with the chunk", 500, 500, 0, 10, 400, -300, []int{900}},
		{"a debt, reserve gone: repaid, and a chunk", 500, 700, 0, 10, 600, -700, []int{1200}},
		// Three sessions share a chunk of 600: one whose partitions have
		// nothing left holds its share of 200 on the way for good
		// (chunkSlack: 400 of the chunk may stay), and the others' records
		// must not wait for it.
		{"three sessions, a share left on the way: more", 600, 600, 400, 10, 300, 200, []int{500}},
		{"three sessions, two shares left on the way: more", 600, 600, 400, 10, 300, 400, []int{300}},
		{"three sessions, more than two shares on the way: none", 600, 600, 400, 10, 300, 401, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeMember()
			x := newExecutor(testExecutorConfig(t, nil, Brokers("fake:9092"), Group("g"), Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })),
				Logger(slog.New(slog.DiscardHandler)), Concurrency(10)), f)
			x.prefetch, x.chunk, x.reserve, x.slack = 1000, tc.chunk, tc.reserve, tc.slack
			x.running, x.queued, x.outstanding = tc.running, tc.queued, tc.outstanding
			x.topUp()
			if got := f.grantList(); !slices.Equal(got, tc.want) {
				t.Fatalf("grants %v, want %v", got, tc.want)
			}
		})
	}
}

func TestChunkSlack(t *testing.T) {
	for _, tc := range []struct{ chunk, fetchers, want int }{
		{0, 3, 0},     // no chunks
		{600, 1, 0},   // one session: all of a chunk is used up
		{600, 0, 0},   // no session fetches yet
		{600, 3, 400}, // all but one session's share
		{500, 2, 250},
	} {
		if got := chunkSlack(tc.chunk, tc.fetchers); got != tc.want {
			t.Errorf("chunkSlack(%d, %d) = %d, want %d", tc.chunk, tc.fetchers, got, tc.want)
		}
	}
}

// feed plays a member that delivers as much as the executor grants, and
// renews every lock asked for, for d; jobs run for work(offset).
func feed(f *fakeMember, next *int64, lock, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if n := f.credit(); n > 0 {
			ds := make([]member.Delivery, n)
			for i := range ds {
				ds[i] = delivery(*next, 1, lock)
				*next++
			}
			f.deliver(ds...)
		}
		f.answerRenewals(lock, nil)
		time.Sleep(10 * time.Millisecond)
	}
}

// A worker that starts on a backlog has its prefetch within tens of
// milliseconds of its first job (the first readings, every
// firstReadingEvery), not only after the first prefetchEvery.
func TestExecutorPrefetchFromTheFirstJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const conc = 10
		work := handler.Func(func(context.Context, *handler.Job) error { // about 1,000 jobs/s on 10 slots
			time.Sleep(10 * time.Millisecond)
			return nil
		})
		f := newFakeMember()
		f.setStats(member.Stats{FetchRTT: 50 * time.Millisecond}) // a prefetch of 200 ms of jobs
		b := startExecutor(t, work, f, Concurrency(conc))
		var next int64
		feed(f, &next, lock, 100*time.Millisecond)
		synctest.Wait()
		if p := f.inHand() - conc; p < 50 {
			t.Fatalf("prefetch %d 100 ms after the first job, want 50 or more (about 1,000 jobs/s × 200 ms)", p)
		}
		b.stop(t)
	})
}

func TestExecutorPrefetchFollowsRateAndLock(t *testing.T) {
	const conc = 100
	// Jobs of 0.5 to 1.4 s: about 105 jobs/s on 100 slots.
	var slow atomic.Int64
	slow.Store(1)
	work := handler.Func(func(ctx context.Context, j *handler.Job) error {
		time.Sleep(time.Duration(slow.Load()) * (500*time.Millisecond + time.Duration(j.Offset%10)*100*time.Millisecond))
		return nil
	})
	for _, tc := range []struct {
		name     string
		rtt      time.Duration
		lock     time.Duration
		min, max int // prefetch (in hand beyond Concurrency) at a steady rate
		slowMax  int // and once the jobs are 4× slower
	}{
		{"four round trips of jobs", 50 * time.Millisecond, lock, 15, 30, 8},                // 105/s × 200 ms ≈ 21, then ≈ 5
		{"a quarter lock of waiting at most", 2 * time.Second, 2 * time.Second, 35, 70, 20}, // 105/s × 0.5 s ≈ 52, then ≈ 13
		{"beyond Concurrency", 2 * time.Second, time.Minute, 600, 1100, 300},                // 105/s × 8 s ≈ 840, then ≈ 210
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow.Store(1)
				f := newFakeMember()
				f.setStats(member.Stats{FetchRTT: tc.rtt})
				b := startExecutor(t, work, f, Concurrency(conc))
				var next int64
				feed(f, &next, tc.lock, 100*time.Millisecond)
				synctest.Wait()
				if got := f.inHand(); got != conc {
					t.Fatalf("%d in hand before any job ended, want %d (no prefetch without a rate)", got, conc)
				}
				feed(f, &next, tc.lock, 10*time.Second)
				for range 20 { // steady: sample for 2 s
					feed(f, &next, tc.lock, 100*time.Millisecond)
					synctest.Wait()
					if p := f.inHand() - conc; p < tc.min || p > tc.max {
						t.Fatalf("prefetch %d at %v, want %d to %d", p, time.Since(time.Unix(946684800, 0)), tc.min, tc.max)
					}
				}
				// Jobs slow down 4×: the prefetch shrinks with the rate,
				// by withholding the credit of finishing jobs (at the
				// slower rate, 40 s run the largest prefetch down).
				slow.Store(4)
				feed(f, &next, tc.lock, 40*time.Second)
				synctest.Wait()
				if p := f.inHand() - conc; p > tc.slowMax {
					t.Fatalf("prefetch %d after the rate fell 4×, want at most %d", p, tc.slowMax)
				}
				b.stop(t)
			})
		})
	}
}

func TestExecutorGracefulStopOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		f := newFakeMember()
		f.manualQuiet = true
		b := startExecutor(t, h, f, Concurrency(3), ShutdownTimeout(10*time.Minute),
			RetryBackoff(func(int32) time.Duration { return time.Minute }))
		const lock = 20 * time.Minute // no renewals in this test
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		h.finish(2, errRetryX) // held for a minute

		b.cancel()
		synctest.Wait()
		if !f.hasStopped() {
			t.Fatal("StopFetching not called when the context ended")
		}
		// The fetch in flight lands: its records run.
		b.f.deliver(delivery(3, 1, lock), delivery(4, 1, lock))
		if got := h.startedList(); !slices.Contains(got, 3) || !slices.Contains(got, 4) {
			t.Fatalf("started %v: the in-flight fetch's records did not run", got)
		}
		h.finish(1, nil)
		h.finish(3, errRetryX) // failing during the stop: held until quiet
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		for _, off := range []int64{2, 3} {
			if got := f.acksOf(off); len(got) != 0 {
				t.Fatalf("offset %d released (%v) before the member was quiet", off, got)
			}
		}
		h.finish(4, nil)
		if f.hasLeft() {
			t.Fatal("left before the held records were acknowledged")
		}
		f.closeQuiet()
		wantAcks(t, f, 2, member.Release)
		wantAcks(t, f, 3, member.Release)
		calls := f.callList()
		order := func(s string) int { return slices.Index(calls, s) }
		if !(order("stop") < order("ack accept t/0@1") && order("quiet") < order("ack release t/0@2") &&
			order("quiet") < order("ack release t/0@3") && order("ack release t/0@2") < order("leave") &&
			order("ack release t/0@3") < order("leave") && order("ack accept t/0@4") < order("leave")) {
			t.Fatalf("calls in order %q", calls)
		}
		if calls[len(calls)-1] != "leave" {
			t.Fatalf("last call %q, want leave", calls[len(calls)-1])
		}
		synctest.Wait()
		if !b.returned() {
			t.Fatal("run did not return after Leave")
		}
		for _, off := range []int64{2, 3} {
			if r := b.only(t, off); r.Ack != AckRelease || !errors.Is(r.Err, errRetryX) || !r.Ran {
				t.Fatalf("offset %d finished with %+v", off, r)
			}
		}
	})
}

func TestExecutorShutdownTimeoutCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		h.ignoreCancel = true
		b := startExecutor(t, h, nil, Concurrency(1), ShutdownTimeout(10*time.Second))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock)) // 2 waits for the slot
		b.cancel()
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("released before the shutdown timeout: %v", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if err := h.cause(1, 0); !errors.Is(err, ErrShutdown) {
			t.Fatalf("context cause %v, want ErrShutdown", err)
		}
		wantAcks(t, b.f, 1, member.Release)
		wantAcks(t, b.f, 2, member.Release)
		if r := b.only(t, 1); r.Ack != AckRelease || !errors.Is(r.Err, ErrShutdown) || !r.Ran {
			t.Fatalf("running job finished with %+v", r)
		}
		if r := b.only(t, 2); r.Ack != AckRelease || !errors.Is(r.Err, ErrShutdown) || r.Ran {
			t.Fatalf("queued job finished with %+v", r)
		}
		if !b.f.hasLeft() {
			t.Fatal("did not leave once every record was released")
		}
		// run waits for the handler that ignores its context.
		time.Sleep(time.Minute)
		synctest.Wait()
		if b.returned() {
			t.Fatal("run returned while a handler still ran")
		}
		h.finish(1, nil) // discarded
		synctest.Wait()
		if !b.returned() {
			t.Fatal("run did not return after the last handler")
		}
		wantAcks(t, b.f, 1, member.Release)
		b.only(t, 1)
		if got := h.startedList(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("started %v", got)
		}
	})
}

func TestExecutorMemberFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		b.f.fail()
		if err := h.cause(1, 0); !errors.Is(err, ErrShutdown) {
			t.Fatalf("context cause %v, want ErrShutdown", err)
		}
		for _, off := range []int64{1, 2} {
			if r := b.only(t, off); r.Ack != AckRelease || !errors.Is(r.Err, ErrShutdown) || r.Ran != (off == 1) {
				t.Fatalf("offset %d finished with %+v", off, r)
			}
			if got := b.f.acksOf(off); len(got) != 0 {
				t.Fatalf("offset %d acknowledged on a failed member: %v", off, got)
			}
		}
		if !b.returned() {
			t.Fatal("run did not return after the member failed and the handler returned")
		}
		if b.f.hasLeft() {
			t.Fatal("Leave called on a failed member")
		}
		b.cancel()
	})
}

func TestExecutorReportsAckFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lines atomic.Int32
		h := newCtl()
		b := startExecutor(t, h, nil, Logger(slog.New(countHandler{&lines})))
		failed := errors.New("INVALID_RECORD_STATE")
		ev := member.Event{}
		for off := range int64(100) {
			ev.Acked = append(ev.Acked, member.AckResult{Key: key(off), Type: member.Accept, Err: failed})
		}
		ev.Acked = append(ev.Acked, member.AckResult{Key: key(100), Type: member.Accept})
		b.f.push(ev)
		b.obs.mu.Lock()
		n := len(b.obs.ackFailed)
		b.obs.mu.Unlock()
		if n != 100 {
			t.Fatalf("AckFailed called %d times, want 100", n)
		}
		if got := lines.Load(); got != 1 {
			t.Fatalf("%d warnings for a burst of 100 failed acks, want 1", got)
		}
		b.stop(t)
	})
}

type countHandler struct{ n *atomic.Int32 }

func (h countHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h countHandler) Handle(context.Context, slog.Record) error    { h.n.Add(1); return nil }
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h countHandler) WithGroup(string) slog.Handler                { return h }

func TestExecutorObserverOncePerDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(4), ShutdownTimeout(time.Second),
			RetryBackoff(func(int32) time.Duration { return time.Minute }))
		expired := delivery(5, 1, lock)
		expired.Deadline = time.Now()
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 1, lock), expired,
			delivery(6, 1, lock), delivery(7, 1, lock))
		b.f.deliver(delivery(1, 2, lock)) // merged into the running job
		h.finish(1, nil)
		h.finish(2, handler.Permanent(errors.New("bad")))
		h.finish(3, errRetryX) // held
		b.f.push(member.Event{Lost: []member.Key{key(4)}})
		// 6 and 7 run; 7 is still running at the shutdown deadline.
		h.finish(6, errRetryX)
		b.stop(t)
		b.obs.mu.Lock()
		defer b.obs.mu.Unlock()
		for off := int64(1); off <= 7; off++ {
			if n := len(b.obs.finished[off]); n != 1 {
				t.Errorf("offset %d: %d JobFinished calls %+v, want 1", off, n, b.obs.finished[off])
			}
		}
		if got := b.obs.started; len(got) != 6 || slices.Contains(got, 5) {
			t.Errorf("JobStarted for %v, want every offset but the expired 5", got)
		}
	})
}

func BenchmarkExecutorNoop(b *testing.B) {
	for _, conc := range []int{10, 100, 1000} {
		b.Run(map[int]string{10: "conc=10", 100: "conc=100", 1000: "conc=1000"}[conc], func(b *testing.B) {
			noop := handler.Func(func(context.Context, *handler.Job) error { return nil })
			cfg := testExecutorConfig(b, nil, Brokers("fake:9092"), Group("g"), Handle("t", noop), Concurrency(conc),
				Logger(slog.New(slog.DiscardHandler)))
			e := newBenchMember(b.N, 500)
			x := newExecutor(cfg, e)
			b.ReportAllocs()
			b.ResetTimer()
			runBench(b, x, e)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// TestExecutorFrozenPastDeadlineIsNotDone is a frozen process's wake-up
// (a SIGSTOP, a long GC or VM pause), played in process: while it is
// frozen its member answers nothing (the renewals asked stay unanswered)
// and the clock runs past the lock; then the handlers return. Their
// records are no longer held (the broker expired the locks and may have
// given them to another member), so their results must not be reported as
// done: the worker still sends the acknowledgement (harmless if refused,
// and right if a renewal in flight did reach the broker), and reports the
// job interrupted with ErrLockLost, its record delivered again.
func TestExecutorFrozenPastDeadlineIsNotDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(4))
		const lock = 10 * time.Second
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock), delivery(4, 1, lock))

		// Offset 4 returns in time, its renewal unanswered: done.
		time.Sleep(lock / 2)
		h.finish(4, nil)
		if r := b.only(t, 4); r.Outcome != OutcomeSucceeded || r.Err != nil {
			t.Fatalf("offset 4, returned within its lock, finished with %+v", r)
		}

		// Frozen past the lock: nothing answered, the handlers blocked.
		time.Sleep(lock)
		if got := len(b.f.renewedKeys()); got == 0 {
			t.Fatal("no renewal asked while the lock ran")
		}
		h.finish(1, nil)
		h.finish(2, handler.Permanent(errors.New("bad input")))
		h.finish(3, errRetryX)
		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Reject)
		wantAcks(t, b.f, 3, member.Release)
		for _, off := range []int64{1, 2} {
			r := b.only(t, off)
			if r.Outcome != OutcomeInterrupted || !errors.Is(r.Err, ErrLockLost) || !r.Ran {
				t.Fatalf("offset %d, returned after its lock ran out, finished with %+v; want OutcomeInterrupted, ErrLockLost", off, r)
			}
		}
		if r := b.only(t, 3); r.Outcome != OutcomeRetried || r.Ack != AckRelease {
			t.Fatalf("offset 3 (a retryable failure) finished with %+v", r)
		}

		// A renewal answered meanwhile moves the deadline: done.
		b.f.answerRenewals(lock, errors.New("answered too late")) // the frozen ones
		b.f.deliver(delivery(5, 1, lock))
		time.Sleep(lock - time.Second)
		synctest.Wait()
		if n := b.f.answerRenewals(lock, nil); n != 1 {
			t.Fatalf("%d renewals answered, want offset 5's", n)
		}
		time.Sleep(2 * time.Second) // past the first deadline
		h.finish(5, nil)
		if r := b.only(t, 5); r.Outcome != OutcomeSucceeded || r.Err != nil {
			t.Fatalf("offset 5, its lock renewed, finished with %+v", r)
		}
		b.stop(t)
	})
}

// TestExecutorDroppedFromTheGroupIsNotDone is a frozen process's wake-up
// when the freeze outlasted the group's session but not the records'
// locks: the coordinator dropped the member and the broker gave its
// records to others at once, while the deadlines the executor knows are
// still ahead. A handler that returns then, before the member's first
// heartbeat after the wake tells it that it was fenced, must not be
// reported done: neither when no heartbeat was answered for longer than
// the session timeout, nor when the member was fenced since the job
// started. A job started after the fencing, with heartbeats answered, is
// done.
func TestExecutorDroppedFromTheGroupIsNotDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		f := newFakeMember()
		f.setStanding(time.Now(), 0)
		const lock, session = 30 * time.Second, 2 * time.Second
		b := startExecutor(t, h, f, Concurrency(4), SessionTimeout(session))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock))
		synctest.Wait()

		// Heartbeats answered: done.
		time.Sleep(time.Second)
		f.setStanding(time.Now(), 0)
		h.finish(1, nil)
		if r := b.only(t, 1); r.Outcome != OutcomeSucceeded || r.Err != nil {
			t.Fatalf("offset 1, heartbeats answered, finished with %+v", r)
		}

		// Frozen past the session (no heartbeat answered since), within
		// the lock: not done, the acks still sent.
		time.Sleep(session + time.Second)
		h.finish(2, handler.Permanent(errors.New("bad input")))
		wantAcks(t, b.f, 2, member.Reject)
		if r := b.only(t, 2); r.Outcome != OutcomeInterrupted || !errors.Is(r.Err, ErrLockLost) || !strings.Contains(r.Err.Error(), "session timeout") {
			t.Fatalf("offset 2, returned with no heartbeat answered for %v (session %v), finished with %+v; want OutcomeInterrupted, ErrLockLost", 3*time.Second, session, r)
		}

		// The member learned it was fenced and rejoined: a heartbeat is
		// answered again, but offset 3 started before the fencing.
		f.setStanding(time.Now(), 1)
		h.finish(3, nil)
		wantAcks(t, b.f, 3, member.Accept)
		if r := b.only(t, 3); r.Outcome != OutcomeInterrupted || !errors.Is(r.Err, ErrLockLost) || !strings.Contains(r.Err.Error(), "dropped") {
			t.Fatalf("offset 3, started before the member was fenced, finished with %+v; want OutcomeInterrupted, ErrLockLost", r)
		}

		// A job of the rejoined member: done.
		b.f.deliver(delivery(4, 1, lock))
		synctest.Wait()
		h.finish(4, nil)
		if r := b.only(t, 4); r.Outcome != OutcomeSucceeded || r.Err != nil {
			t.Fatalf("offset 4, started after the fencing, finished with %+v", r)
		}
		b.stop(t)
	})
}

// TestExecutorCountsEveryOutcome: the executor's count by outcome is an
// array indexed by Outcome; every outcome must fit in it.
func TestExecutorCountsEveryOutcome(t *testing.T) {
	var x executor
	for _, o := range Outcomes() {
		if int(o) < 0 || int(o) >= len(x.outcomes) {
			t.Fatalf("outcome %v (%d) is outside the executor's counts (%d)", o, o, len(x.outcomes))
		}
	}
}
