package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// startWorker runs a worker until the returned stop is called (or the test
// ends); stop returns Run's error. The pattern of worker/helpers_test.go.
func startWorker(t *testing.T, opts ...worker.Option) (stop func() error) {
	t.Helper()
	w, err := worker.New(append([]worker.Option{worker.Logger(quietLogger()), worker.ShutdownTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	stop = kafkatest.Run(t, w.Run)
	return stop
}

// waitFor scrapes reg until cond holds, or fails t.
func waitFor(t *testing.T, reg *prometheus.Registry, timeout time.Duration, what string, cond func(mfs map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		mfs := scrape(t, reg)
		if cond(mfs) {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func counter(mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	return sum(mfs, name, labels...)
}

// A real worker on a share group: 5 jobs accepted, 2 released once and
// then accepted, 1 rejected.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	keys := []string{"ok-1", "ok-2", "ok-3", "ok-4", "ok-5", "retry-1", "retry-2", "bad"}
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(k)}
	}
	c.Produce(t, recs...)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Topics(topic))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		switch k := string(job.Key); {
		case strings.HasPrefix(k, "retry") && job.DeliveryCount == 1:
			return errors.New("not yet")
		case k == "bad":
			return handler.Permanent(errors.New("bad job"))
		}
		return nil
	})
	stop := startWorker(t, worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.Concurrency(2), worker.Observers(m))

	mfs := waitFor(t, reg, 60*time.Second, "10 acknowledgements, the member joined with both partitions", func(mfs map[string]*dto.MetricFamily) bool {
		n := 0.0
		for _, ack := range []string{"accept", "release", "reject"} {
			n += counter(mfs, "shareq_jobs_total", "topic", topic, "ack", ack)
		}
		return n >= 10 && counter(mfs, "shareq_member_state", "state", "joined") == 1 && counter(mfs, "shareq_member_partitions") == 2
	})
	for ack, want := range map[string]float64{"accept": 7, "release": 2, "reject": 1} {
		if got := value(t, mfs, "shareq_jobs_total", "topic", topic, "ack", ack); got != want {
			t.Errorf("jobs_total{ack=%q} = %v, want %v", ack, got, want)
		}
	}
	for outcome, want := range map[string]float64{"succeeded": 7, "retried": 2, "discarded": 1, "parked": 0, "interrupted": 0, "cancelled": 0} {
		if got := value(t, mfs, "shareq_jobs_total", "topic", topic, "outcome", outcome); got != want {
			t.Errorf("jobs_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	// One observation per delivery: 5 + 2*2 + 1 = 10, with counts
	// 5*1 + 2*(1+2) + 1 = 12.
	dc := histogram(t, mfs, "shareq_delivery_count", "topic", topic)
	if dc.count != 10 || dc.sum != 12 || dc.buckets[1] != 8 || dc.buckets[2] != 10 {
		t.Errorf("delivery_count count %d sum %v le1 %d le2 %d; want 10, 12, 8, 10", dc.count, dc.sum, dc.buckets[1], dc.buckets[2])
	}
	if d := histogram(t, mfs, "shareq_job_duration_seconds", "topic", topic); d.count != 10 {
		t.Errorf("job_duration count = %d, want 10 (every delivery ran)", d.count)
	}
	ll := histogram(t, mfs, "shareq_lock_remaining_seconds", "topic", topic)
	if ll.count != 10 || ll.buckets[0] != 0 {
		t.Errorf("lock_remaining count %d, run out %d; want 10, 0", ll.count, ll.buckets[0])
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", topic); got != 0 {
		t.Errorf("jobs_in_flight after the last ack = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_jobs_expired_total", "topic", topic); got != 0 {
		t.Errorf("jobs_expired_total = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_ack_errors_total", "topic", topic); got != 0 {
		t.Errorf("ack_errors_total = %v, want 0", got)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mfs = scrape(t, reg)
	if got := value(t, mfs, "shareq_member_state", "state", "left"); got != 1 {
		t.Errorf("member_state{state=left} after stop = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_records_held"); got != 0 {
		t.Errorf("records_held after stop = %v, want 0", got)
	}
	// The broker applied every acknowledgement the worker sent.
	for ack, want := range map[string]float64{"accept": 7, "release": 2, "reject": 1} {
		if got := value(t, mfs, "shareq_acks_total", "ack", ack); got != want {
			t.Errorf("acks_total{ack=%q} after stop = %v, want %v", ack, got, want)
		}
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", topic); got != 0 {
		t.Errorf("jobs_in_flight after stop = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_jobs_total", "topic", topic, "ack", "accept"); got != 7 {
		t.Errorf("jobs_total{ack=accept} after stop = %v, want 7 (no job ran twice)", got)
	}
}

// The webhook worker: 3 jobs succeed and 3 are parked by the dlq
// middleware. Parked jobs are ACCEPTed but counted as parked, not as
// successes, and the dlq hook and the observer agree.
func TestWorkerMetricsCountParkedApart(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.CreateTopic(t, topic+dlq.TopicSuffix, 1)
	var recs []*kgo.Record
	for _, k := range []string{"ok-1", "bad-1", "ok-2", "bad-2", "ok-3", "bad-3"} {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(k)})
	}
	c.Produce(t, recs...)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Topics(topic))
	if err != nil {
		t.Fatal(err)
	}
	park, err := dlq.Middleware(c.Client(t), dlq.Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if strings.HasPrefix(string(job.Key), "bad") {
			return handler.Permanent(errors.New("invalid webhook URL"))
		}
		return nil
	})
	stop := startWorker(t, worker.Brokers(c.Seeds...), worker.Group(group), worker.AutoOffsetReset("earliest"),
		worker.Handle(topic, h, park), worker.RequireTopics(topic+dlq.TopicSuffix), worker.Observers(m))
	mfs := waitFor(t, reg, 60*time.Second, "6 jobs finished", func(mfs map[string]*dto.MetricFamily) bool {
		return counter(mfs, "shareq_jobs_total", "topic", topic) >= 6
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mfs = scrape(t, reg)
	for _, c := range []struct {
		outcome, ack string
		want         float64
	}{{"succeeded", "accept", 3}, {"parked", "accept", 3}, {"retried", "release", 0}, {"discarded", "reject", 0}} {
		if got := value(t, mfs, "shareq_jobs_total", "topic", topic, "outcome", c.outcome, "ack", c.ack); got != c.want {
			t.Errorf("jobs_total{outcome=%q,ack=%q} = %v, want %v", c.outcome, c.ack, got, c.want)
		}
	}
	if got := value(t, mfs, "shareq_jobs_parked_total", "topic", topic, "reason", handler.ReasonPermanent); got != 3 {
		t.Errorf("jobs_parked_total{reason=permanent} = %v, want 3", got)
	}
	if got := len(c.Consume(t, topic+dlq.TopicSuffix, 3)); got != 3 {
		t.Errorf("DLQ topic has %d records, want 3", got)
	}
}

// A real worker with a key limit: while one key's destination is down,
// its breaker is open and its jobs wait (the gauges say so, the topic's
// opened counter counts one); the other key's jobs all run; once the key
// is back the breaker closes and nothing waits. No series names a key.
func TestWorkerMetricsKeyBreaker(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	var recs []*kgo.Record
	for i := range 6 {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("down-%d", i))})
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("up-%d", i))})
	}
	c.Produce(t, recs...)

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Topics(topic))
	if err != nil {
		t.Fatal(err)
	}
	var isDown atomic.Bool
	isDown.Store(true)
	keyOf := func(job *handler.Job) string { k, _, _ := strings.Cut(string(job.Key), "-"); return k }
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		if keyOf(job) == "down" && isDown.Load() {
			return handler.KeyUnavailable(errors.New("connect: connection refused"))
		}
		return nil
	})
	startWorker(t, worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h), worker.Concurrency(4),
		worker.KeyLimit(topic, worker.Keys{Key: keyOf}), worker.Observers(m))

	mfs := waitFor(t, reg, 60*time.Second, "the up key's jobs done, the down key's breaker open and its other jobs waiting", func(mfs map[string]*dto.MetricFamily) bool {
		return counter(mfs, "shareq_jobs_total", "topic", topic, "outcome", "succeeded") == 6 &&
			counter(mfs, "shareq_key_breakers_open") == 1 && counter(mfs, "shareq_jobs_waiting_for_keys") >= 5
	})
	if got := value(t, mfs, "shareq_key_breakers_opened_total", "topic", topic); got != 1 {
		t.Errorf("key_breakers_opened_total = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_key_breakers_closed_total", "topic", topic); got != 0 {
		t.Errorf("key_breakers_closed_total while down = %v, want 0", got)
	}
	for name, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if strings.HasPrefix(lp.GetValue(), "down") || strings.HasPrefix(lp.GetValue(), "up") {
					t.Errorf("%s has label %s=%q: a key", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}

	isDown.Store(false)
	mfs = waitFor(t, reg, 60*time.Second, "every job done, the breaker closed and nothing waiting", func(mfs map[string]*dto.MetricFamily) bool {
		return counter(mfs, "shareq_jobs_total", "topic", topic, "outcome", "succeeded") == 12 &&
			counter(mfs, "shareq_key_breakers_open") == 0 && counter(mfs, "shareq_jobs_waiting_for_keys") == 0
	})
	if got := value(t, mfs, "shareq_key_breakers_closed_total", "topic", topic); got != 1 {
		t.Errorf("key_breakers_closed_total = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_key_breakers_open_seconds_total", "topic", topic); got <= 0 {
		t.Errorf("key_breakers_open_seconds_total = %v, want the time it was open", got)
	}
	// Waiting spent no delivery: nothing was released.
	if got := counter(mfs, "shareq_jobs_total", "topic", topic, "ack", "release"); got != 0 {
		t.Errorf("jobs_total{ack=release} = %v, want 0: jobs waiting for their key spend no delivery", got)
	}
}

// A snooze longer than the worker holds a job: the original is accepted
// and counted as snoozed (not as a success), and the copy, fetched before
// it is due, is held: shareq_jobs_snoozed_held counts it.
func TestWorkerMetricsSnooze(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.Produce(t, &kgo.Record{Topic: topic, Key: []byte("job-1")})

	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Topics(topic))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		return handler.Snooze(time.Hour)
	})
	startWorker(t, worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.MaxHold(1500*time.Millisecond), worker.Observers(m))

	mfs := waitFor(t, reg, 60*time.Second, "the job snoozed and its copy held", func(mfs map[string]*dto.MetricFamily) bool {
		return counter(mfs, "shareq_jobs_total", "topic", topic, "outcome", "snoozed") >= 1 &&
			counter(mfs, "shareq_jobs_snoozed_held") == 1
	})
	if got := value(t, mfs, "shareq_jobs_total", "topic", topic, "outcome", "snoozed", "ack", "accept"); got != 1 {
		t.Errorf("jobs_total{outcome=snoozed,ack=accept} = %v, want 1", got)
	}
	if got := counter(mfs, "shareq_jobs_total", "topic", topic, "outcome", "succeeded"); got != 0 {
		t.Errorf("jobs_total{outcome=succeeded} = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", topic); got != 0 {
		t.Errorf("jobs_in_flight = %v, want 0: the copy's handler has not started", got)
	}
}
