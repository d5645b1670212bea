package shareqtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the testing package's does; see fatal.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fatal runs fn with a fatalTB on a goroutine of its own and returns the
// message fn failed with ("" if it did not fail).
func fatal(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.msg
}

func TestRunAcceptsEveryJob(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.Topic("thumbnails"), shareqtest.Partitions(3))
	var ids []string
	for i := range 20 {
		ids = append(ids, q.Produce(t, fmt.Appendf(nil, "image %d", i), shareqtest.Key(fmt.Append(nil, i)), shareqtest.Header("size", []byte("small"))))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	res := q.Run(t, handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(job.Value)]++
		if size, _ := job.Header("size"); string(size) != "small" || fmt.Sprintf("image %s", job.Key) != string(job.Value) {
			t.Errorf("job %q: key %q, size header %q; want the key and header Produce set", job.Value, job.Key, size)
		}
		return nil
	}), worker.Concurrency(4))

	res.RequireCounts(t, shareqtest.Counts{Accepted: 20})
	res.RequireAccepted(t, ids...)
	if len(seen) != 20 {
		t.Errorf("handler saw %d distinct jobs, want 20", len(seen))
	}
	jobs := res.Jobs()
	for i, j := range jobs {
		if j.ID != ids[i] {
			t.Fatalf("Jobs()[%d] is %s, want %s (produce order)", i, j.ID, ids[i])
		}
		if j.ID != fmt.Sprintf("thumbnails/%d/%d", j.Partition, j.Offset) || string(j.Value) != fmt.Sprintf("image %d", i) ||
			string(j.Key) != fmt.Sprint(i) || len(j.Headers) != 1 || j.Headers[0].Key != "size" {
			t.Errorf("job %d = %+v", i, j)
		}
		if len(j.Deliveries) != 1 || j.Deliveries[0].Count != 1 || !j.Deliveries[0].Ran || j.Deliveries[0].Ack != worker.AckAccept {
			t.Errorf("job %s deliveries %+v", j.ID, j.Deliveries)
		}
	}
	if got := res.IDs(shareqtest.Accepted); !slices.Equal(got, ids) {
		t.Errorf("IDs(Accepted) = %v", got)
	}
	if q.Topic() != "thumbnails" || q.Group() != shareqtest.GroupDefault || q.DeliveryLimit() != 5 || len(q.Brokers()) != 1 {
		t.Errorf("accessors: %s %s %d %v", q.Topic(), q.Group(), q.DeliveryLimit(), q.Brokers())
	}
}

func TestRunOutcomes(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.DeliveryLimit(4))
	ok := q.Produce(t, []byte("ok"), shareqtest.JobID("ok"))
	perm := q.Produce(t, []byte("permanent"), shareqtest.JobID("permanent"))
	retry := q.Produce(t, []byte("retry-twice"), shareqtest.JobID("retry-twice"))
	always := q.Produce(t, []byte("always-fails"), shareqtest.JobID("always-fails"))
	boom := q.Produce(t, []byte("panics"), shareqtest.JobID("panics"))
	reasonless := q.Produce(t, []byte("plain-error-then-ok"))

	res := q.Run(t, handler.Func(func(ctx context.Context, job *handler.Job) error {
		if job.DeliveryLimit != 4 {
			return handler.Permanent(fmt.Errorf("job.DeliveryLimit = %d, want 4", job.DeliveryLimit))
		}
		switch string(job.Value) {
		case "permanent":
			return handler.Permanent(errors.New("no such user"))
		case "retry-twice":
			if job.DeliveryCount <= 2 {
				return handler.Retry("rate-limited", errors.New("slow down"))
			}
		case "always-fails":
			return handler.Retry("upstream-503", errors.New("503"))
		case "panics":
			panic("boom")
		case "plain-error-then-ok":
			if job.DeliveryCount == 1 {
				return errors.New("transient")
			}
		}
		return nil
	}))

	res.RequireCounts(t, shareqtest.Counts{Accepted: 3, Rejected: 2, Archived: 1})
	res.RequireAccepted(t, ok, retry, reasonless)
	res.RequireRejected(t, perm, handler.ReasonPermanent)
	res.RequireRejected(t, boom, handler.ReasonPanic)
	res.RequireArchived(t, always)
	res.RequireReleased(t, ok, 0)
	res.RequireReleased(t, retry, 2)
	res.RequireReleased(t, always, 4)
	res.RequireReleased(t, reasonless, 1)

	j, found := res.Job(always)
	if !found || j.Reason != "upstream-503" || j.Err == nil || len(j.Deliveries) != 4 {
		t.Fatalf("always-fails: %+v", j)
	}
	for i, d := range j.Deliveries {
		if d.Count != int32(i+1) || d.Ack != worker.AckRelease || !d.Ran || handler.ReasonOf(d.Err) != "upstream-503" {
			t.Errorf("always-fails delivery %d: %+v", i, d)
		}
	}
	if j, _ := res.Job(perm); j.Err == nil || !strings.Contains(j.Err.Error(), "no such user") {
		t.Errorf("permanent: Err = %v", j.Err)
	}
	if j, _ := res.Job(ok); j.Err != nil || j.Reason != "" {
		t.Errorf("ok: Err %v, Reason %q", j.Err, j.Reason)
	}
	if _, found := res.Job("nope"); found {
		t.Error(`Job("nope") found`)
	}
}

func TestRunAgainWaitsForNewJobsOnly(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	accept := handler.Func(func(context.Context, *handler.Job) error { return nil })
	first := q.Produce(t, []byte("1"))
	res := q.Run(t, accept)
	res.RequireCounts(t, shareqtest.Counts{Accepted: 1})

	if msg := fatal(t, func(tb testing.TB) { q.Run(tb, accept) }); !strings.Contains(msg, "no jobs to wait for") {
		t.Errorf("Run with nothing produced: %q", msg)
	}

	second := q.Produce(t, []byte("2"))
	res = q.Run(t, accept)
	res.RequireAccepted(t, second)
	if _, found := res.Job(first); found {
		t.Errorf("the second Run reports %s, finished by the first", first)
	}
}

func TestRunWaitsForJobsProducedByTheHandler(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	q.ProduceJSON(t, map[string]int{"fanout": 3}, shareqtest.JobID("parent"))
	res := q.Run(t, handler.JSON(func(ctx context.Context, job *handler.Job, v struct{ Fanout int }) error {
		for i := range v.Fanout {
			q.ProduceJSON(t, map[string]int{"fanout": 0}, shareqtest.JobID(fmt.Sprintf("child-%d", i)))
		}
		return nil
	}))
	res.RequireAccepted(t, "parent", "child-0", "child-1", "child-2")
	res.RequireCounts(t, shareqtest.Counts{Accepted: 4})
}

func TestDLQParksAndKeepsTheEnvelope(t *testing.T) {
	t.Parallel()
	var hooked atomic.Int32
	q := shareqtest.New(t, shareqtest.DLQ(dlq.OnPark(func(*handler.Job, string) { hooked.Add(1) })),
		shareqtest.DeliveryLimit(2), shareqtest.Topic("webhooks"))
	id := q.Produce(t, []byte(`{"url":"http://x"}`), shareqtest.JobID("hook-1"))
	refused := errors.New("connection refused")
	res := q.Run(t, handler.Func(func(context.Context, *handler.Job) error { return refused }))
	res.RequireParked(t, id, handler.ReasonDeliveryLimit)
	res.RequireReleased(t, id, 1)
	j, _ := res.Job(id)
	if d := j.Deliveries; len(d) != 2 || d[0].Parked || d[0].Outcome != worker.OutcomeRetried ||
		!d[1].Parked || d[1].Outcome != worker.OutcomeParked || d[1].Ack != worker.AckAccept || !errors.Is(d[1].Err, refused) {
		t.Errorf("deliveries %+v", d)
	}
	if !errors.Is(j.Err, refused) {
		t.Errorf("parked job's Err = %v, want the failure it was parked for", j.Err)
	}
	// The user's own OnPark hook is kept (Run no longer replaces it).
	if n := hooked.Load(); n != 1 {
		t.Errorf("the DLQ option's OnPark hook was called %d times, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	parked, err := dlq.List(ctx, q.Client(), "webhooks.dlq", dlq.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(parked) != 1 || parked[0].JobID() != "hook-1" || parked[0].Reason != handler.ReasonDeliveryLimit || parked[0].DeliveryCount != 2 {
		t.Fatalf("parked %+v", parked)
	}
}

// A job whose claim holds a cancel (the chain returns a CancelledError,
// as idempotency.Middleware does) is Cancelled, not Accepted.
func TestRunReportsCancelledJobs(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	stopped := q.Produce(t, []byte("a"), shareqtest.JobID("stopped"))
	ran := q.Produce(t, []byte("b"), shareqtest.JobID("ran"))
	res := q.Run(t, handler.Func(func(ctx context.Context, j *handler.Job) error {
		if j.ID() == "stopped" {
			return handler.Cancelled(nil)
		}
		return nil
	}))
	res.RequireCancelled(t, stopped)
	res.RequireAccepted(t, ran)
	res.RequireCounts(t, shareqtest.Counts{Accepted: 1, Cancelled: 1})
	j, _ := res.Job(stopped)
	if d := j.Deliveries; len(d) != 1 || d[0].Outcome != worker.OutcomeCancelled || d[0].Ack != worker.AckAccept {
		t.Errorf("deliveries %+v", d)
	}
}

func TestRequireFailuresSayWhatHappened(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.DeliveryLimit(2))
	good := q.Produce(t, []byte("good"), shareqtest.JobID("good"))
	bad := q.Produce(t, []byte("bad"), shareqtest.JobID("bad"))
	res := q.Run(t, handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Value) == "bad" {
			return handler.Permanent(errors.New("malformed"))
		}
		return nil
	}))
	for _, tc := range []struct {
		name string
		fn   func(tb testing.TB)
		want []string
	}{
		{"accepted", func(tb testing.TB) { res.RequireAccepted(tb, good, bad) },
			[]string{"job bad is rejected, want accepted", "delivery 1: reject (discarded): permanent failure (permanent): malformed"}},
		{"reason", func(tb testing.TB) { res.RequireRejected(tb, bad, handler.ReasonDecode) },
			[]string{`job bad is rejected with reason "permanent", want reason "decode"`}},
		{"released", func(tb testing.TB) { res.RequireReleased(tb, good, 1) },
			[]string{"job good was released 0 times, want 1"}},
		{"archived", func(tb testing.TB) { res.RequireArchived(tb, good) },
			[]string{"job good is accepted, want archived"}},
		{"parked", func(tb testing.TB) { res.RequireParked(tb, bad, "") },
			[]string{"job bad is rejected, want parked"}},
		{"unknown", func(tb testing.TB) { res.RequireAccepted(tb, "ghost") },
			[]string{`no job "ghost" was delivered in this Run; jobs: ["good" "bad"]`}},
		{"counts", func(tb testing.TB) { res.RequireCounts(tb, shareqtest.Counts{Accepted: 2}) },
			[]string{"outcomes {Accepted:1 Rejected:1 Parked:0 Archived:0 Pending:0 Cancelled:0}, want {Accepted:2", "job good (jobs/0/0): accepted after 1 deliveries"}},
	} {
		msg := fatal(t, tc.fn)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: message %q lacks %q", tc.name, msg, w)
			}
		}
	}
}

func TestRunTimesOutOnAStuckJob(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.RunTimeout(time.Second))
	q.Produce(t, []byte("stuck"), shareqtest.JobID("stuck"))
	start := time.Now()
	msg := fatal(t, func(tb testing.TB) {
		q.Run(tb, handler.Func(func(ctx context.Context, _ *handler.Job) error {
			<-ctx.Done() // until the worker gives up on it
			return ctx.Err()
		}), worker.ShutdownTimeout(100*time.Millisecond))
	})
	for _, w := range []string{"after 1s, 1 of the jobs have no final outcome", "job stuck (jobs/0/0): pending after 1 deliveries", "worker: shut down before the job finished"} {
		if !strings.Contains(msg, w) {
			t.Errorf("timeout message %q lacks %q", msg, w)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a timed-out Run took %v", took)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	t.Parallel()
	msg := fatal(t, func(tb testing.TB) {
		shareqtest.New(tb, shareqtest.Topic(""), shareqtest.Partitions(0), shareqtest.DeliveryLimit(1),
			shareqtest.LockDuration(time.Millisecond), shareqtest.RunTimeout(0), shareqtest.Group(" "), shareqtest.CreateTopics("jobs"))
	})
	for _, w := range []string{`Topic("")`, "Partitions(0)", "DeliveryLimit(1)", "LockDuration(1ms)", "RunTimeout(0s)", `Group(" ")`} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
}

func TestClientReadsTopicsOfTheHandler(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.CreateTopics("receipts"))
	q.Produce(t, []byte("order-1"))
	res := q.Run(t, handler.Func(func(ctx context.Context, job *handler.Job) error {
		return q.Client().ProduceSync(ctx, &kgo.Record{Topic: "receipts", Value: append([]byte("receipt for "), job.Value...)}).FirstErr()
	}))
	res.RequireCounts(t, shareqtest.Counts{Accepted: 1})

	cl, err := kgo.NewClient(kgo.SeedBrokers(q.Brokers()...), kgo.ConsumeTopics("receipts"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs := cl.PollFetches(ctx).Records()
	if len(recs) != 1 || string(recs[0].Value) != "receipt for order-1" {
		t.Fatalf("receipts: %v", recs)
	}
}

// A job that fails until its last delivery is retried with
// RetryBackoffDefault between deliveries, not the worker's 1, 2, 4, 8 s:
// with those holds alone the five deliveries could not take less than
// 15 s, so a Run that takes less used the fast default (the figure is
// logged). A worker.RetryBackoff given to Run replaces it.
func TestRetriesUseTheFastDefaultBackoff(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	id := q.Produce(t, []byte("flaky"))
	var calls atomic.Int32
	flaky := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if calls.Add(1) < shareqtest.DeliveryLimitDefault {
			return errors.New("the API is down")
		}
		return nil
	})
	began := time.Now()
	res := q.Run(t, flaky)
	took := time.Since(began)
	res.RequireAccepted(t, id)
	if j, _ := res.Job(id); len(j.Deliveries) != shareqtest.DeliveryLimitDefault {
		t.Errorf("%d deliveries, want %d", len(j.Deliveries), shareqtest.DeliveryLimitDefault)
	}
	if production := 15 * time.Second; took >= production {
		t.Errorf("a job retried %d times took %v: the worker's own backoff (%v of holds), not the %v default", shareqtest.DeliveryLimitDefault-1, took, production, shareqtest.RetryBackoffDefault)
	}
	t.Logf("%d deliveries in %v", shareqtest.DeliveryLimitDefault, took)

	// Run's own worker.RetryBackoff wins: one retry held 500 ms.
	q2 := shareqtest.New(t)
	id2 := q2.Produce(t, []byte("flaky once"))
	calls.Store(shareqtest.DeliveryLimitDefault - 2)
	began = time.Now()
	res = q2.Run(t, flaky, worker.RetryBackoff(func(int32) time.Duration { return 500 * time.Millisecond }))
	res.RequireAccepted(t, id2)
	if took := time.Since(began); took < 500*time.Millisecond {
		t.Errorf("with worker.RetryBackoff(500ms) one retry took %v, want at least 500ms", took)
	}
}

// A batch handler with its claims (handler.Batch around idempotency.Batch
// on a MemoryStore) runs in Run as in a worker: the job that fails is
// released alone and runs again; the others run once.
func TestRunBatchWithClaims(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	var ids []string
	for _, row := range []string{"a", "flaky", "c"} {
		ids = append(ids, q.Produce(t, []byte(row), shareqtest.JobID("row-"+row)))
	}
	var mu sync.Mutex
	runs := map[string]int{}
	fn, err := idempotency.Batch(idempotency.NewMemoryStore(), func(_ context.Context, jobs []*handler.Job) []error {
		mu.Lock()
		defer mu.Unlock()
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			runs[j.ID()]++
			if j.ID() == "row-flaky" && j.DeliveryCount == 1 {
				errs[i] = errors.New("lock timeout")
			}
		}
		return errs
	})
	if err != nil {
		t.Fatal(err)
	}
	res := q.Run(t, handler.Batch(3, time.Second, fn), worker.Concurrency(3))
	res.RequireAccepted(t, ids...)
	res.RequireReleased(t, "row-flaky", 1)
	mu.Lock()
	defer mu.Unlock()
	if got := fmt.Sprint(runs); got != "map[row-a:1 row-c:1 row-flaky:2]" {
		t.Errorf("runs %s, want row-flaky twice and the others once", got)
	}
}
