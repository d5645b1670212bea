package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// A batch handler gets the worker's jobs in calls of up to its size; a
// job that fails retries alone (its batch's other jobs are accepted
// once), a permanent failure is rejected alone, and every job's outcome
// is its own, as with a handler of one job.
func TestBatchHandlerOutcomesPerJob(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%02d", i)
	}
	b.produce(t, keys...)

	var mu sync.Mutex
	var sizes []int
	runs := map[string][]int32{}
	bh := handler.Batch(10, 200*time.Millisecond, func(_ context.Context, jobs []*handler.Job) []error {
		errs := make([]error, len(jobs))
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(jobs))
		for i, j := range jobs {
			k := string(j.Key)
			runs[k] = append(runs[k], j.DeliveryCount)
			switch {
			case k == "job-07" && j.DeliveryCount == 1:
				errs[i] = handler.RetryAfter(10*time.Millisecond, errors.New("deadlock, try again"))
			case k == "job-13":
				errs[i] = handler.Permanent(errors.New("bad row"))
			}
		}
		return errs
	})
	b.start(t, bh, worker.Concurrency(10))

	b.obs.WaitFor(t, 30*time.Second, "every job's outcome", func(fs []finished) bool {
		for _, k := range keys {
			want, ack := 1, worker.AckAccept
			if k == "job-13" {
				ack = worker.AckReject
			}
			if count(fs, k, ack) != want {
				return false
			}
		}
		return count(fs, "job-07", worker.AckRelease) == 1
	})

	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		want := "[1]"
		if k == "job-07" {
			want = "[1 2]"
		}
		if got := fmt.Sprint(runs[k]); got != want {
			t.Errorf("%s ran with delivery counts %s, want %s", k, got, want)
		}
	}
	most := 0
	for _, n := range sizes {
		most = max(most, n)
	}
	if most > 10 || most < 2 {
		t.Errorf("batch sizes %v: want some of more than one job, none above 10", sizes)
	}
}
