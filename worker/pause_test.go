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

var errConnRefused = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

// outage is a handler whose jobs fail with handler.Unavailable("db")
// while down is set, with errRetryX for the offsets in failing, and
// succeed otherwise. It counts every run and the delivery count it saw.
type outage struct {
	down    atomic.Bool
	mu      sync.Mutex
	runs    map[int64][]int32
	failing map[int64]bool
}

func newOutage() *outage { return &outage{runs: map[int64][]int32{}, failing: map[int64]bool{}} }

func (o *outage) Handle(_ context.Context, j *handler.Job) error {
	o.mu.Lock()
	o.runs[j.Offset] = append(o.runs[j.Offset], j.DeliveryCount)
	fail := o.failing[j.Offset]
	o.mu.Unlock()
	switch {
	case o.down.Load():
		return fmt.Errorf("claim: %w", handler.Unavailable("db", errConnRefused))
	case fail:
		return errRetryX
	}
	return nil
}

func (o *outage) runsOf(off int64) []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.runs[off])
}

// pauses is a PauseObserver that keeps what it is told.
type pauses struct {
	NopObserver
	mu      sync.Mutex
	events  []string
	lastErr error
}

func (p *pauses) WorkerPaused(dep string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "paused "+dep)
	p.lastErr = err
}

func (p *pauses) WorkerResumed(dep string, down time.Duration, back bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf("resumed %s after %v back=%v", dep, down, back))
}

func (p *pauses) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// countLines counts the log lines at level with msg in out.
func countLines(out, level, msg string) int {
	return strings.Count(out, "level="+level+" msg=\""+msg)
}

func TestExecutorPausesWhileDependencyDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		h.down.Store(true)
		var logs logbuf.Buffer
		po := &pauses{}
		b := startExecutor(t, h, nil, Concurrency(3), Observers(po),
			Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		if got := b.f.grantList(); !slices.Equal(got, []int{3}) {
			t.Fatalf("grants %v at start, want [3]", got)
		}
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))

		// Both fail as unavailable: held, not released; nothing granted.
		for _, off := range []int64{1, 2} {
			if got := b.f.acksOf(off); len(got) != 0 {
				t.Fatalf("offset %d acked %v during the outage, want held", off, got)
			}
		}
		if got := b.f.grantList(); !slices.Equal(got, []int{3}) {
			t.Fatalf("grants %v while paused, want none after [3]", got)
		}
		if got := b.dependenciesDown(); !slices.Equal(got, []string{"db"}) {
			t.Fatalf("DependenciesDown = %v, want [db]", got)
		}
		if got := po.list(); !slices.Equal(got, []string{"paused db"}) || !errors.Is(po.lastErr, errConnRefused) {
			t.Fatalf("observer heard %v (%v), want [paused db]", got, po.lastErr)
		}

		// A record fetched on credit granted before the pause waits: it is
		// not started while paused, though a slot is free.
		b.f.deliver(delivery(3, 1, lock))
		if got := h.runsOf(3); len(got) != 0 {
			t.Fatalf("queued record started while paused: %v", got)
		}

		// Probes: one held job at a time (the one whose failure came
		// first), after 250 ms, 500 ms, 1 s, 2 s, 2 s…
		runs := func() int { return len(h.runsOf(1)) + len(h.runsOf(2)) }
		wantRuns := 2
		for _, d := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second} {
			time.Sleep(d - time.Nanosecond)
			synctest.Wait()
			if got := runs(); got != wantRuns {
				t.Fatalf("offsets 1 and 2 ran %d times before the probe delay %v, want %d", got, d, wantRuns)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			wantRuns++
			if got := runs(); got != wantRuns {
				t.Fatalf("offsets 1 and 2 ran %d times after the probe delay %v, want %d (one probe)", got, d, wantRuns)
			}
		}
		if n1, n2 := len(h.runsOf(1)), len(h.runsOf(2)); min(n1, n2) != 1 {
			t.Fatalf("offsets 1 and 2 ran %d and %d times: the probes must re-run the same held job", n1, n2)
		}
		// The locks (30 s) are renewed while held.
		time.Sleep(15*time.Second - time.Since(start))
		synctest.Wait()
		if got := b.f.renewedKeys(); !slices.Contains(got, key(1)) || !slices.Contains(got, key(2)) {
			t.Fatalf("renewed %v while paused, want offsets 1 and 2", got)
		}
		b.f.answerRenewals(lock, nil)

		// The dependency comes back: the next probe gets through, every
		// held job runs again on the same delivery, then the queued one,
		// and credit flows again.
		h.down.Store(false)
		time.Sleep(probeMax)
		synctest.Wait()
		for _, off := range []int64{1, 2, 3} {
			wantAcks(t, b.f, off, member.Accept)
			for _, c := range h.runsOf(off) {
				if c != 1 {
					t.Fatalf("offset %d ran with delivery counts %v, want 1 every time", off, h.runsOf(off))
				}
			}
			if r := b.only(t, off); r.Outcome != OutcomeSucceeded {
				t.Fatalf("offset %d finished %+v", off, r)
			}
		}
		if n1, n2 := len(h.runsOf(1)), len(h.runsOf(2)); min(n1, n2) != 2 || max(n1, n2) != 11 {
			// Probes at 0.25, 0.75, 1.75, 3.75 s, then every 2 s until
			// 13.75 s failed; the one at 15.75 s got through.
			t.Fatalf("offsets 1 and 2 ran %d and %d times, want 2 (held, then run again after the pause) and 11 (the first run, 9 probes that failed, one that got through)", n1, n2)
		}
		if got := b.f.grantList(); len(got) < 2 {
			t.Fatalf("grants %v after the pause, want credit again", got)
		}
		if b.f.credit() != 3 {
			t.Fatalf("credit %d after the pause, want 3 (Concurrency)", b.f.credit())
		}
		if got := b.dependenciesDown(); got != nil {
			t.Fatalf("DependenciesDown = %v after the pause, want nil", got)
		}
		if got := b.obs.startedList(); !slices.Equal(got, []int64{1, 2, 3}) {
			t.Fatalf("JobStarted for %v, want once per job: [1 2 3]", got)
		}
		if got := po.list(); len(got) != 2 || !strings.HasPrefix(got[1], "resumed db after ") || !strings.HasSuffix(got[1], "back=true") {
			t.Fatalf("observer heard %v, want paused then resumed back=true", got)
		}
		b.stop(t)
		out := logs.String()
		if n := countLines(out, "WARN", "dependency down; the worker paused"); n != 1 {
			t.Errorf("%d down lines, want 1:\n%s", n, out)
		}
		if n := countLines(out, "INFO", "dependency back; the worker resumed"); n != 1 {
			t.Errorf("%d back lines, want 1:\n%s", n, out)
		}
		if !strings.Contains(out, "dependency back; the worker resumed\" group=g dependency=db down_for=") || !strings.Contains(out, "jobs_waited=3") {
			t.Errorf("the back line lacks dependency, down_for or jobs_waited=3 (two held, one queued):\n%s", out)
		}
		if n := strings.Count(out, "level=WARN"); n != 1 {
			t.Errorf("%d WARN lines, want only the down line:\n%s", n, out)
		}
		if !strings.Contains(out, "level=DEBUG msg=\"job held: a dependency is down\"") {
			t.Errorf("no Debug line for the held jobs:\n%s", out)
		}
	})
}

func TestExecutorKeepsRetryingOrdinaryErrorsWhilePaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		b := startExecutor(t, h, nil, Concurrency(2))
		h.mu.Lock()
		h.failing[2] = true
		h.mu.Unlock()
		h.down.Store(true)
		b.f.deliver(delivery(1, 1, lock))
		h.down.Store(false)
		// Job 2 fails with an ordinary error while the worker is paused
		// (a job that was running, or any job, keeps today's outcome).
		b.f.deliver(delivery(2, 1, lock))
		if got := h.runsOf(2); len(got) != 0 {
			t.Fatal("queued job ran while paused")
		}
		time.Sleep(probeFirst)
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Release) // RetryBackoff(nil): at once
		if r := b.only(t, 2); r.Outcome != OutcomeRetried || !errors.Is(r.Err, errRetryX) {
			t.Fatalf("ordinary failure reported as %+v", r)
		}
		// On its last delivery an ordinary failure is discarded (the dlq
		// middleware would park it), as before.
		h.mu.Lock()
		h.failing[3] = true
		h.mu.Unlock()
		b.f.deliver(delivery(3, 5, lock))
		if r := b.only(t, 3); r.Outcome != OutcomeDiscarded {
			t.Fatalf("last-delivery failure reported as %+v", r)
		}
		b.stop(t)
	})
}

func TestExecutorReleasesPausedJobAtMaxHoldThenProbesWithNewRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		h.down.Store(true)
		b := startExecutor(t, h, nil, Concurrency(1), MaxHold(time.Minute))
		start := time.Now()
		b.f.deliver(delivery(1, 1, lock))
		for time.Since(start) < time.Minute-probeMax {
			time.Sleep(time.Second)
			synctest.Wait()
			b.f.answerRenewals(lock, nil)
		}
		if got := b.f.acksOf(1); len(got) != 0 {
			t.Fatalf("released before MaxHold: %v", got)
		}
		time.Sleep(time.Minute - time.Since(start))
		synctest.Wait()
		wantAcks(t, b.f, 1, member.Release)
		if r := b.only(t, 1); r.Outcome != OutcomeRetried || !handler.IsUnavailable(r.Err) || r.Final {
			t.Fatalf("paused job released at MaxHold reported as %+v", r)
		}
		// Nothing in hand to probe with: one record is fetched for it.
		grants := b.f.grantList()
		time.Sleep(probeMax)
		synctest.Wait()
		if got := b.f.grantList(); !slices.Equal(got, append(grants, 1)) {
			t.Fatalf("grants %v, want one more credit of 1 for a probe (was %v)", got, grants)
		}
		if b.dependenciesDown() == nil {
			t.Fatal("not paused any more before a probe got through")
		}
		h.down.Store(false)
		b.f.deliver(delivery(2, 1, lock))
		wantAcks(t, b.f, 2, member.Accept)
		if b.dependenciesDown() != nil {
			t.Fatal("still paused after a probe got through")
		}
		if b.f.credit() != 1 {
			t.Fatalf("credit %d after the pause, want 1", b.f.credit())
		}
		b.stop(t)
	})
}

func TestExecutorShutdownWhilePausedReleasesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		h.down.Store(true)
		f := newFakeMember()
		f.manualQuiet = true
		var logs logbuf.Buffer
		po := &pauses{}
		b := startExecutor(t, h, f, Concurrency(2), Observers(po), ShutdownTimeout(time.Hour),
			Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		f.deliver(delivery(1, 1, lock), delivery(2, 2, lock), delivery(3, 1, lock))
		b.cancel()
		synctest.Wait()
		for _, off := range []int64{1, 2, 3} {
			if got := f.acksOf(off); len(got) != 0 {
				t.Fatalf("offset %d acked %v before quiet", off, got)
			}
		}
		time.Sleep(10 * probeMax)
		synctest.Wait()
		if got := len(h.runsOf(1)); got != 1 {
			t.Fatalf("offset 1 ran %d times while stopping, want 1: no probes after the stop", got)
		}
		f.closeQuiet()
		wantAcks(t, f, 1, member.Release)
		wantAcks(t, f, 2, member.Release)
		wantAcks(t, f, 3, member.Release)
		if r := b.only(t, 1); r.Outcome != OutcomeRetried || !handler.IsUnavailable(r.Err) {
			t.Fatalf("held job released at the stop reported as %+v", r)
		}
		if r := b.only(t, 3); r.Outcome != OutcomeInterrupted || !errors.Is(r.Err, ErrShutdown) || r.Ran {
			t.Fatalf("queued job released at the stop reported as %+v", r)
		}
		if !b.returned() {
			t.Fatal("run did not return once quiet")
		}
		if got := po.list(); len(got) != 2 || !strings.HasSuffix(got[1], "back=false") {
			t.Fatalf("observer heard %v, want paused then resumed back=false", got)
		}
		if got := b.dependenciesDown(); got != nil {
			t.Fatalf("DependenciesDown = %v after the stop, want nil", got)
		}
		out := logs.String()
		if !strings.Contains(out, "level=INFO msg=\"worker stopping: fetching no more; running jobs may finish until the shutdown timeout, held ones are released\" group=g running=0 queued=1 held_for_retry=0 shutdown_timeout=1h0m0s held_for_pause=2 dependencies_down=db") {
			t.Errorf("no stopping line with the jobs in hand:\n%s", out)
		}
	})
}

func TestExecutorUnavailableWhileStoppingIsReleasedLikeRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1))
		b.f.deliver(delivery(1, 1, lock))
		b.cancel()
		synctest.Wait()
		h.finish(1, handler.Unavailable("db", errConnRefused))
		wantAcks(t, b.f, 1, member.Release)
		if b.dependenciesDown() != nil {
			t.Fatal("paused while stopping")
		}
		if !b.returned() {
			t.Fatal("run did not return")
		}
	})
}

func TestExecutorPermanentUnavailableIsPermanent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		b := startExecutor(t, h, nil, Concurrency(1))
		b.f.deliver(delivery(1, 1, lock))
		h.finish(1, handler.Permanent(handler.Unavailable("db", errConnRefused)))
		wantAcks(t, b.f, 1, member.Reject)
		if b.dependenciesDown() != nil {
			t.Fatal("a permanent error paused the worker")
		}
		b.stop(t)
	})
}

func TestExecutorSecondDependencyJoinsPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		var logs logbuf.Buffer
		b := startExecutor(t, h, nil, Concurrency(2), Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		b.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock))
		h.finish(1, handler.Unavailable("db", errConnRefused))
		h.finish(2, handler.Unavailable("payments-api", errConnRefused))
		if got := b.dependenciesDown(); !slices.Equal(got, []string{"db", "payments-api"}) {
			t.Fatalf("DependenciesDown = %v", got)
		}
		time.Sleep(probeFirst)
		synctest.Wait()
		h.finish(1, nil) // the probe gets through: both are back
		h.finish(2, nil)
		wantAcks(t, b.f, 1, member.Accept)
		wantAcks(t, b.f, 2, member.Accept)
		b.stop(t)
		out := logs.String()
		if countLines(out, "WARN", "dependency down;") != 1 || countLines(out, "WARN", "another dependency down;") != 1 ||
			!strings.Contains(out, "dependency=db,payments-api") {
			t.Errorf("want one down line per dependency and one back line for both:\n%s", out)
		}
	})
}

func TestExecutorRenewsQueuedRecordsThroughLongPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		h.down.Store(true)
		b := startExecutor(t, h, nil, Concurrency(2))
		b.f.deliver(delivery(1, 1, lock))
		b.f.deliver(delivery(2, 1, lock)) // on credit granted before: queued
		// Four lock periods of outage, the member answering every renewal.
		for start := time.Now(); time.Since(start) < 4*lock; {
			time.Sleep(time.Second)
			synctest.Wait()
			b.f.answerRenewals(lock, nil)
		}
		if got := b.f.renewedKeys(); !slices.Contains(got, key(2)) {
			t.Fatalf("renewed %v: the queued record's lock was not renewed", got)
		}
		if got := h.runsOf(2); len(got) != 0 {
			t.Fatalf("queued record ran during the pause: %v", got)
		}
		h.down.Store(false)
		time.Sleep(probeMax)
		synctest.Wait()
		for _, off := range []int64{1, 2} {
			wantAcks(t, b.f, off, member.Accept)
		}
		if got := h.runsOf(2); !slices.Equal(got, []int32{1}) {
			t.Fatalf("queued record ran with delivery counts %v, want [1]", got)
		}
		b.stop(t)
	})
}

func TestExecutorProbesWithQueuedRecordWhenNoneHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newOutage()
		h.down.Store(true)
		b := startExecutor(t, h, nil, Concurrency(2))
		b.f.deliver(delivery(1, 1, lock))
		b.f.deliver(delivery(2, 1, lock)) // queued: the worker is paused
		// The member loses job 1's lock (its session went away): no held
		// job is left to probe with, so the queued record is the probe.
		b.f.push(member.Event{Lost: []member.Key{key(1)}})
		if r := b.only(t, 1); !errors.Is(r.Err, ErrLockLost) {
			t.Fatalf("lost job reported as %+v", r)
		}
		time.Sleep(probeFirst)
		synctest.Wait()
		if got := h.runsOf(2); !slices.Equal(got, []int32{1}) {
			t.Fatalf("queued record ran %v times as the probe, want once on delivery 1", got)
		}
		if got := b.f.acksOf(2); len(got) != 0 {
			t.Fatalf("the probe that found the dependency down was acked %v, want held", got)
		}
		h.down.Store(false)
		time.Sleep(2 * probeFirst)
		synctest.Wait()
		wantAcks(t, b.f, 2, member.Accept)
		if b.dependenciesDown() != nil {
			t.Fatal("still paused after the probe got through")
		}
		b.stop(t)
	})
}
