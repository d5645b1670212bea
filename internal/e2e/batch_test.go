package e2e_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// The tests here run a batch handler (handler.Batch) behind
// idempotency.Batch on pgstore: a batch's rows are written in one
// statement through one claim transaction.

// startBatches runs a worker on e with the thumbnailer as a batch
// function behind idempotency.Batch, in batches of size (waiting at most
// 200 ms for company), twice size jobs at once, and returns the count of
// suppressed duplicates.
func (e *env) startBatches(t *testing.T, th *thumbnailer, size int) *atomic.Int64 {
	t.Helper()
	var dups atomic.Int64
	fn, err := newBatchClaims(t.Context(), e.db.connect(t, "", 4), &dups, th.HandleBatch)
	if err != nil {
		t.Fatal(err)
	}
	e.start(t, handler.Batch(size, 200*time.Millisecond, fn), worker.Concurrency(2*size))
	return &dups
}

// waitAccepted waits until every job of ids is accepted.
func (e *env) waitAccepted(t *testing.T, timeout time.Duration, ids []string) []event {
	t.Helper()
	return e.obs.WaitFor(t, timeout, fmt.Sprintf("%d jobs accepted", len(ids)), func(es []event) bool {
		a := acked(es)
		for _, id := range ids {
			if !a[id] {
				return false
			}
		}
		return true
	})
}

// A job of a batch that fails is released alone and runs again; the
// batch's other jobs are accepted once, their rows committed with their
// claims. Every job's row is there once.
func TestBatchFailingJobRetriesAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	all := ids(20)
	e.produce(t, all...)
	th := newThumbnailer(0)
	th.fail = func(job *handler.Job) error {
		if job.ID() == jobID(7) && job.DeliveryCount == 1 {
			return handler.RetryAfter(10*time.Millisecond, errors.New("deadlock detected"))
		}
		return nil
	}
	dups := e.startBatches(t, th, 10)
	es := e.waitAccepted(t, 60*time.Second, all)

	for _, id := range all {
		want := "[1]"
		if id == jobID(7) {
			want = "[1 2]"
		}
		if got := fmt.Sprint(th.ran(id)); got != want {
			t.Errorf("%s ran on deliveries %s, want %s", id, got, want)
		}
	}
	if n := countAck(es, worker.AckRelease); n != 1 {
		t.Errorf("%d releases, want 1 (the failing job's): %s", n, shareqtest.Summary(es))
	}
	if dups.Load() != 0 {
		t.Errorf("%d duplicates suppressed, want 0", dups.Load())
	}
	checkOnce(t, e, all)
}

// The worker process dies (SIGKILL) with one batch committed and not yet
// acknowledged, and the next batch's rows written in its open
// transaction. The next worker finds the first batch's claims and accepts
// its jobs without running them, runs the second batch's jobs again
// (their transaction died with the process) and the jobs never run:
// every job's row is there once.
func TestCrashMidBatchRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	const size = 5
	all := ids(3 * size)
	e.produce(t, all...)

	committed := map[string]bool{}
	lines, kill := startCrashWorker(t, e, size)
	for mid := false; len(committed) < size || !mid; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the crash worker exited before a batch committed and another was under way")
			}
			var id string
			var n int32
			switch {
			case strings.HasPrefix(line, "MIDBATCH "):
				mid = true
			case strings.HasPrefix(line, "COMMITTED "):
				if _, err := fmt.Sscanf(line, "COMMITTED %s %d", &id, &n); err != nil {
					t.Fatalf("crash worker said %q", line)
				}
				committed[id] = true
			default:
				t.Fatalf("crash worker said %q", line)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("after 60s the crash worker had committed %d jobs, want a batch of %d and another under way", len(committed), size)
		}
	}
	kill()
	rows := e.db.rowsPerJob(t)
	for _, id := range all {
		if want := map[bool]int{true: 1}[committed[id]]; rows[id] != want {
			t.Fatalf("after the kill, job %s has %d rows, want %d (committed: %v)", id, rows[id], want, committed[id])
		}
	}

	th := newThumbnailer(0)
	dups := e.startBatches(t, th, size)
	// The dead member's locks run out within a lock duration.
	e.waitAccepted(t, e.c.LockDuration+e.c.LockSweep+60*time.Second, all)
	for id := range committed {
		if runs := th.ran(id); len(runs) != 0 {
			t.Errorf("the second worker ran committed job %s on deliveries %v, want never", id, runs)
		}
	}
	if dups.Load() != size {
		t.Errorf("%d duplicates suppressed, want %d (the committed batch)", dups.Load(), size)
	}
	checkOnce(t, e, all)
	t.Logf("%s: killed with %d jobs committed and a batch under way; the next worker ran %d jobs, %d duplicates suppressed",
		e.c.Kind, len(committed), th.totalRuns(), dups.Load())
}
