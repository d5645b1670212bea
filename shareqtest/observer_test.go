package shareqtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// runWorker runs a worker on q's broker with opts until the test ends.
func runWorker(t *testing.T, q *shareqtest.Queue, opts ...worker.Option) {
	t.Helper()
	w, err := worker.New(append([]worker.Option{
		worker.Brokers(q.Brokers()...), worker.Group(q.Group()),
		worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5 * time.Second),
		worker.RetryBackoff(func(int32) time.Duration { return 10 * time.Millisecond }),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	})
}

func TestObserverWaitJobReturnsTheFinalDelivery(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t)
	flaky := q.Produce(t, []byte("flaky"), shareqtest.JobID("flaky"), shareqtest.Key([]byte("k1")))
	var obs shareqtest.Observer
	runWorker(t, q, worker.Observers(&obs), worker.Handle(q.Topic(), handler.Func(func(ctx context.Context, job *handler.Job) error {
		if job.DeliveryCount < 3 {
			return errors.New("not yet")
		}
		return nil
	})))

	e := obs.WaitJob(t, 30*time.Second, flaky)
	if e.ID != flaky || e.Key != "k1" || e.Count != 3 || e.Result.Ack != worker.AckAccept || !e.Result.Final || e.At.IsZero() {
		t.Errorf("WaitJob = %+v, want the ACCEPT of delivery 3 of %s (key k1)", e, flaky)
	}
	es := obs.Events()
	if len(es) != 3 || obs.Count(0) != 3 || obs.Count(worker.AckRelease) != 2 || obs.Count(worker.AckAccept) != 1 || obs.Count(worker.AckReject) != 0 {
		t.Fatalf("events: %s; want two releases, then one accept", shareqtest.Summary(es))
	}
	for i, e := range es {
		if e.Count != int32(i+1) || e.Result.Final != (i == 2) {
			t.Errorf("event %d: delivery %d, final %v; want delivery %d, final %v", i, e.Count, e.Result.Final, i+1, i == 2)
		}
	}
}

func TestObserverCountsRenewals(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.LockDuration(500*time.Millisecond))
	id := q.Produce(t, []byte("long"))
	var obs shareqtest.Observer
	runWorker(t, q, worker.Observers(&obs), worker.Handle(q.Topic(), handler.Func(func(ctx context.Context, job *handler.Job) error {
		// Run until the worker has renewed this job's lock twice.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ok, _ := obs.Renewals(); ok < 2; ok, _ = obs.Renewals() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		return nil
	})))

	if e := obs.WaitJob(t, 30*time.Second, id); e.Result.Ack != worker.AckAccept || e.Count != 1 {
		t.Fatalf("the long job: %s; want one ACCEPT on delivery 1", shareqtest.Summary(obs.Events()))
	}
	if ok, failed := obs.Renewals(); ok < 2 || failed != 0 {
		t.Errorf("Renewals() = %d, %d; want at least 2 and 0", ok, failed)
	}
}

func TestObserverWaitsFailWithWhatTheyWaitedFor(t *testing.T) {
	t.Parallel()
	var obs shareqtest.Observer
	obs.JobFinished(&handler.Job{Topic: "jobs", Offset: 7, Key: []byte("k")}, worker.Result{Ack: worker.AckRelease, Ran: true, Err: errors.New("boom")})

	msg := fatal(t, func(tb testing.TB) {
		obs.WaitFor(tb, 50*time.Millisecond, "the impossible", func([]shareqtest.Event) bool { return false })
	})
	if want := "timed out after 50ms waiting for the impossible; 1 events (0 accept, 1 release, 0 reject) [jobs/0/7 (key k) #0 release ran=true err=boom]"; !strings.Contains(msg, want) {
		t.Errorf("WaitFor failed with %q, want it to contain %q", msg, want)
	}
	msg = fatal(t, func(tb testing.TB) { obs.WaitJob(tb, 50*time.Millisecond, "jobs/0/7") })
	if !strings.Contains(msg, "waiting for job jobs/0/7 to finish for good") {
		t.Errorf("WaitJob of a released job failed with %q, want it to say it waited for the job to finish", msg)
	}
	// A condition met by the time the wait starts returns at once.
	if es := obs.WaitFor(t, time.Nanosecond, "one event", func(es []shareqtest.Event) bool { return len(es) == 1 }); len(es) != 1 {
		t.Errorf("WaitFor returned %d events, want 1", len(es))
	}
}

func TestSummaryKeepsTheLast40(t *testing.T) {
	t.Parallel()
	var es []shareqtest.Event
	for i := range 45 {
		es = append(es, shareqtest.Event{ID: "job-" + string(rune('a'+i%26)), Count: 1, Result: worker.Result{Ack: worker.AckAccept, Ran: true}})
	}
	s := shareqtest.Summary(es)
	if !strings.HasPrefix(s, "45 events (45 accept, 0 release, 0 reject); last 40: [job-f #1 accept ran=true err=<nil>]") || strings.Count(s, "[") != 40 {
		t.Errorf("Summary = %q, want 45 counted and the last 40 listed", s)
	}
}
