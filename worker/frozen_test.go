package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// frozenWorkerEnv, set to "seeds|group|topic|session-ms", makes the test
// binary a frozen worker: a worker.Worker (client ID frozenClientID,
// concurrency 2) whose handler prints "RUN offset delivery", sleeps a
// second and succeeds, and whose observer prints
// "FINISH offset delivery outcome lock-lost" (lock-lost: whether the
// Result's error is worker.ErrLockLost) for each job. The test freezes
// it with SIGSTOP.
const frozenWorkerEnv = "SHAREQ_TEST_FROZEN_WORKER"

const frozenClientID = "shareq-frozen-worker"

// runFrozenWorker makes the test binary a frozen worker when it was
// started as one; it then never returns.
func runFrozenWorker() {
	v := os.Getenv(frozenWorkerEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	ms, _ := strconv.Atoi(parts[3])
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		fmt.Println("RUN", job.Offset, job.DeliveryCount)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Second):
			return nil
		}
	})
	w, err := worker.New(worker.Brokers(strings.Split(parts[0], ",")...), worker.Group(parts[1]),
		worker.Handle(parts[2], h), worker.Concurrency(2),
		worker.SessionTimeout(time.Duration(ms)*time.Millisecond),
		worker.ClientOpts(kgo.ClientID(frozenClientID)),
		worker.Observers(finishPrinter{Observer: new(shareqtest.Observer)}),
		worker.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("PID", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fmt.Println("ERR Run returned", w.Run(ctx))
	os.Exit(3)
}

type finishPrinter struct{ *shareqtest.Observer }

func (finishPrinter) JobFinished(job *handler.Job, r worker.Result) {
	fmt.Println("FINISH", job.Offset, job.DeliveryCount, r.Outcome, errors.Is(r.Err, worker.ErrLockLost))
}

// A worker frozen with jobs in hand (SIGSTOP: a long GC or VM pause, a
// container throttled to nothing) past its record locks and its session:
// the broker gives the records to another member and drops the frozen
// one from the group. Woken (SIGCONT), the worker must not report the
// jobs it no longer holds as done (its handlers return at once: their
// timers ran out while it was frozen), must rejoin the group with a new
// member epoch, and must take work again. A child process, not an
// in-process freeze, so that every goroutine of the worker, its client's
// included, stops as in a real pause, and the broker sees what it would;
// TestExecutorFrozenPastDeadlineIsNotDone plays the executor's side in
// process.
func TestFrozenWorkerWakesWithoutClaimingLostJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const session = 2 * time.Second
	lines, _ := kafkatest.StartChild(t, fmt.Sprintf("%s=%s|%s|%s|%d", frozenWorkerEnv, strings.Join(b.c.Seeds, ","), b.group, b.topic, session.Milliseconds()))
	next := func(what string, match func(f []string) bool) []string {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the frozen worker exited while the test waited for %s", what)
				}
				f := strings.Fields(line)
				if len(f) > 0 && f[0] == "ERR" {
					t.Fatalf("frozen worker: %s", line)
				}
				if match(f) {
					return f
				}
			case <-deadline:
				t.Fatalf("the frozen worker printed no %s within 60s", what)
			}
		}
	}
	pid, _ := strconv.Atoi(next("PID", func(f []string) bool { return len(f) == 2 && f[0] == "PID" })[1])
	// The member's epoch is read before the jobs exist, so that nothing
	// stands between their start and the freeze: each handler runs a
	// second, and a freeze after one has returned would freeze a job
	// already done.
	var epoch int32
	waitFor(t, 60*time.Second, "the worker to join the group", func() bool {
		id, e := frozenMember(t, b)
		epoch = e
		return id != "" && e > 0
	})
	b.produce(t, "a", "b")
	running := map[string]bool{}
	for len(running) < 2 {
		f := next("RUN", func(f []string) bool { return len(f) == 3 && f[0] == "RUN" })
		running[f[1]] = true
	}

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	woken := false
	wake := func() {
		if !woken {
			woken = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(wake) // so that the kill at the cleanup ends it
	// Frozen until the broker has given both records to another member
	// (their locks ran out) and dropped the frozen one from the group.
	other := b.c.ShareConsumer(t, b.group, []string{b.topic})
	took := map[int64]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(took) < 2 && ctx.Err() == nil {
		other.PollRecords(ctx, 10).EachRecord(func(r *kgo.Record) {
			took[r.Offset] = true
			r.Ack(kgo.AckAccept)
		})
	}
	if len(took) < 2 {
		t.Fatalf("the other member took %v within 60s, want both records", took)
	}
	if err := other.FlushAcks(ctx); err != nil {
		t.Fatalf("the other member's ACCEPTs: %v", err)
	}
	other.Close()
	waitFor(t, 60*time.Second, "the coordinator to drop the frozen member", func() bool {
		id, _ := frozenMember(t, b)
		return id == ""
	})
	wake()

	// Its two jobs end interrupted by the lost lock, not done.
	for range 2 {
		f := next("FINISH", func(f []string) bool { return len(f) == 5 && f[0] == "FINISH" && running[f[1]] })
		if f[3] == worker.OutcomeSucceeded.String() || f[4] != "true" {
			t.Fatalf("woken worker finished offset %s (held before the freeze) with %v, want interrupted by ErrLockLost", f[1], f[2:])
		}
		delete(running, f[1])
	}
	// It rejoins with a new epoch and takes new work.
	waitFor(t, 60*time.Second, "the woken worker to rejoin", func() bool {
		id, e := frozenMember(t, b)
		return id != "" && e > 0 && e != epoch
	})
	b.produce(t, "c")
	f := next("FINISH of the new job", func(f []string) bool { return len(f) == 5 && f[0] == "FINISH" && f[1] == "2" })
	if f[3] != worker.OutcomeSucceeded.String() {
		t.Fatalf("the new job finished with %v", f[2:])
	}
}

// frozenMember returns the frozen worker's member ID and epoch, or "" when
// the group does not list it.
func frozenMember(t *testing.T, b *bundle) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := b.c.Admin().DescribeShareGroups(ctx, b.group)
	if err != nil {
		t.Fatalf("describe the group: %v", err)
	}
	for _, m := range gs[b.group].Members {
		if m.ClientID == frozenClientID {
			return m.MemberID, m.MemberEpoch
		}
	}
	return "", 0
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
