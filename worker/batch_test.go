package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
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

// batchSizes is a batch function that records the size of each call and
// succeeds every job.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) run(_ context.Context, jobs []*handler.Job) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(jobs))
	return make([]error, len(jobs))
}

func (b *batchSizes) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprint(b.sizes)
}

// With jobs waiting, every batch fills to its size before its wait ends:
// 60 jobs make 6 calls of 10, none shorter.
func TestBatchHandlerFillsToSize(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%02d", i)
	}
	b.produce(t, keys...)
	calls := &batchSizes{}
	// A wait far longer than the test: a batch that did not fill would
	// show as a call shorter than 10, or as the test's timeout.
	b.start(t, handler.Batch(10, time.Minute, calls.run), worker.Concurrency(20))
	b.obs.WaitFor(t, 50*time.Second, "60 jobs accepted", func(fs []finished) bool {
		return len(fs) == len(keys)
	})
	for _, f := range b.obs.Events() {
		if f.Result.Ack != worker.AckAccept {
			t.Errorf("%s: %v, want ACCEPT", f.Key, f.Result.Ack)
		}
	}
	if got := calls.String(); got != "[10 10 10 10 10 10]" {
		t.Errorf("batch sizes %s, want [10 10 10 10 10 10]", got)
	}
}

// A job alone runs once its wait for company has passed, in a call of
// one.
func TestBatchHandlerWaitRunsALoneJob(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "alone")
	calls := &batchSizes{}
	b.start(t, handler.Batch(10, 100*time.Millisecond, calls.run), worker.Concurrency(10))
	b.obs.WaitFor(t, 30*time.Second, "the job accepted", func(fs []finished) bool {
		return count(fs, "alone", worker.AckAccept) == 1
	})
	if got := calls.String(); got != "[1]" {
		t.Errorf("batch sizes %s, want [1]", got)
	}
}

// parkProducer stands in for the dead-letter topic's client: it keeps
// what it is given.
type parkProducer struct {
	mu      sync.Mutex
	records []*kgo.Record
}

func (p *parkProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res kgo.ProduceResults
	for _, r := range rs {
		p.records = append(p.records, r)
		res = append(res, kgo.ProduceResult{Record: r})
	}
	return res
}

func (p *parkProducer) keys() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for _, r := range p.records {
		ks = append(ks, string(r.Key))
	}
	return ks
}

// A permanent failure of one job of a batch parks that job alone, through
// the dead-letter middleware of the worker's chain; the others succeed.
func TestBatchHandlerParksPerJob(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	keys := []string{"row-1", "row-2", "bad-row", "row-4", "row-5"}
	b.produce(t, keys...)
	prod := &parkProducer{}
	park, err := dlq.Middleware(prod)
	if err != nil {
		t.Fatal(err)
	}
	insert := handler.Batch(5, time.Minute, func(_ context.Context, jobs []*handler.Job) []error {
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			if string(j.Key) == "bad-row" {
				errs[i] = handler.Permanent(errors.New("row does not fit the table"))
			}
		}
		return errs
	})
	b.start(t, insert, worker.Use(park), worker.Concurrency(5))
	fs := b.obs.WaitFor(t, 30*time.Second, "every job's outcome", func(fs []finished) bool {
		return len(fs) == len(keys)
	})
	for _, f := range fs {
		want := worker.OutcomeSucceeded
		if f.Key == "bad-row" {
			want = worker.OutcomeParked
		}
		if f.Result.Outcome != want || f.Result.Ack != worker.AckAccept {
			t.Errorf("%s: %v/%v, want %v/ACCEPT", f.Key, f.Result.Outcome, f.Result.Ack, want)
		}
	}
	if got := fmt.Sprint(prod.keys()); got != "[bad-row]" {
		t.Errorf("dead-letter records for %s, want [bad-row]", got)
	}
}
