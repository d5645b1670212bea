package metrics_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// setup returns a fresh registry and Metrics registered with it.
func setup(t *testing.T, opts ...metrics.Option) (*prometheus.Registry, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return reg, m
}

func job(topic string, delivery int32) *handler.Job {
	return &handler.Job{Topic: topic, Partition: 0, Offset: 1, Key: []byte("user-123"), DeliveryCount: delivery}
}

func TestNewRegistersEveryMetricWithTopics(t *testing.T) {
	t.Parallel()
	reg, _ := setup(t, metrics.Topics("emails"))

	var got []string
	for name := range scrape(t, reg) {
		got = append(got, name)
	}
	slices.Sort(got)
	// The histograms and the parked counter have no series until their
	// first event; every other metric exists at zero for the topic.
	// The member's gauges and counters have no labels, so they exist at
	// zero from the start.
	want := []string{
		"shareq_ack_errors_total",
		"shareq_duplicates_suppressed_total",
		"shareq_fetch_rtt_seconds",
		"shareq_fetches_total",
		"shareq_jobs_expired_total",
		"shareq_jobs_in_flight",
		"shareq_jobs_snoozed_held",
		"shareq_jobs_total",
		"shareq_jobs_waiting_for_keys",
		"shareq_key_breakers_closed_total",
		"shareq_key_breakers_open",
		"shareq_key_breakers_open_seconds_total",
		"shareq_key_breakers_opened_total",
		"shareq_lock_renewals_total",
		"shareq_member_partitions",
		"shareq_member_rejoins_total",
		"shareq_partition_records_skipped_total",
		"shareq_partitions_stalled",
		"shareq_records_buffered",
		"shareq_records_fetched_total",
		"shareq_records_held",
		"shareq_records_held_bytes",
		"shareq_records_lost_total",
		"shareq_sessions_opened_total",
		"shareq_sessions_reset_total",
		"shareq_stall_heals_total",
		"shareq_topic_missing",
		"shareq_topic_paused",
		"shareq_topic_recreations_total",
	}
	if !slices.Equal(got, want) {
		t.Errorf("families = %v, want %v", got, want)
	}
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_jobs_total Records acknowledged by the worker, by topic, outcome (succeeded, parked, retried, discarded, interrupted, cancelled, snoozed) and acknowledgement (accept, release, reject).
# TYPE shareq_jobs_total counter
shareq_jobs_total{ack="accept",outcome="cancelled",topic="emails"} 0
shareq_jobs_total{ack="accept",outcome="parked",topic="emails"} 0
shareq_jobs_total{ack="accept",outcome="snoozed",topic="emails"} 0
shareq_jobs_total{ack="accept",outcome="succeeded",topic="emails"} 0
shareq_jobs_total{ack="reject",outcome="discarded",topic="emails"} 0
shareq_jobs_total{ack="release",outcome="discarded",topic="emails"} 0
shareq_jobs_total{ack="release",outcome="interrupted",topic="emails"} 0
shareq_jobs_total{ack="release",outcome="retried",topic="emails"} 0
`), "shareq_jobs_total")
	if err != nil {
		t.Error(err)
	}
}

func TestMetricNamesPassLint(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	driveEveryMethod(m)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	if n := len(scrape(t, reg)); n != 33 {
		t.Errorf("%d metric families after every event, want 33", n)
	}
}

func driveEveryMethod(m *metrics.Metrics) {
	j := job("emails", 1)
	m.JobStarted(j)
	m.JobFinished(j, worker.Result{Ack: worker.AckAccept, Ran: true, Duration: time.Second, LockLeft: time.Second})
	m.JobFinished(j, worker.Result{Ack: worker.AckRelease, Err: worker.ErrLockExpired})
	m.LockRenewed(j, nil)
	m.AckFailed("emails", 0, errors.New("x"))
	m.JobFinished(j, worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckAccept, Parked: &handler.DeadLetter{Reason: handler.ReasonDecode}, Ran: true})
	m.Duplicate(j, "emails/0/1")
	m.TopicMissing("emails", true)
	m.TopicRecreated("emails")
	m.PartitionSkipped("emails", 3, 10)
	m.PartitionStalled("emails", 3, true)
	m.MemberStats(worker.MemberStats{State: "joined", Fetches: 1, Acks: map[worker.Ack]int64{worker.AckAccept: 1}, Waiting: 1, Snoozed: 1, BreakersOpen: 1})
	m.JobFinished(j, worker.Result{Outcome: worker.OutcomeSnoozed, Ack: worker.AckAccept})
	m.KeyDown("emails", "user-123", errors.New("x"))
	m.KeyBack("emails", "user-123", time.Second)
}

func TestTopicEvents(t *testing.T) {
	t.Parallel()
	reg, m := setup(t, metrics.Topics("emails"))
	m.TopicMissing("emails", true)
	if got := value(t, scrape(t, reg), "shareq_topic_missing", "topic", "emails"); got != 1 {
		t.Errorf("topic_missing while deleted = %v, want 1", got)
	}
	m.TopicMissing("emails", false)
	m.TopicRecreated("emails")
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_topic_missing", "topic", "emails"); got != 0 {
		t.Errorf("topic_missing once back = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_topic_recreations_total", "topic", "emails"); got != 1 {
		t.Errorf("topic_recreations_total = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_partition_records_skipped_total", "topic", "emails"); got != 0 {
		t.Errorf("partition_records_skipped_total before any = %v, want 0", got)
	}
	m.PartitionSkipped("emails", 3, 10)
	m.PartitionSkipped("emails", 4, 7)
	if got := value(t, scrape(t, reg), "shareq_partition_records_skipped_total", "topic", "emails"); got != 17 {
		t.Errorf("partition_records_skipped_total = %v, want 17", got)
	}
}

func TestStallEvents(t *testing.T) {
	t.Parallel()
	reg, m := setup(t, metrics.Topics("emails"))
	if got := value(t, scrape(t, reg), "shareq_partitions_stalled", "topic", "emails"); got != 0 {
		t.Errorf("partitions_stalled before any = %v, want 0", got)
	}
	m.PartitionStalled("emails", 3, true)
	m.PartitionStalled("emails", 4, true)
	if got := value(t, scrape(t, reg), "shareq_partitions_stalled", "topic", "emails"); got != 2 {
		t.Errorf("partitions_stalled with two stalled = %v, want 2", got)
	}
	m.PartitionStalled("emails", 3, false)
	if got := value(t, scrape(t, reg), "shareq_partitions_stalled", "topic", "emails"); got != 1 {
		t.Errorf("partitions_stalled once one moves again = %v, want 1", got)
	}
}

func TestPauseEvents(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	m.WorkerPaused("postgres", errors.New("connection refused"))
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_worker_paused", "dependency", "postgres"); got != 1 {
		t.Errorf("worker_paused while down = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_worker_pauses_total", "dependency", "postgres"); got != 1 {
		t.Errorf("worker_pauses_total = %v, want 1", got)
	}
	m.WorkerResumed("postgres", 12*time.Second, true)
	mfs = scrape(t, reg)
	if got := value(t, mfs, "shareq_worker_paused", "dependency", "postgres"); got != 0 {
		t.Errorf("worker_paused once back = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_worker_paused_seconds_total", "dependency", "postgres"); got != 12 {
		t.Errorf("worker_paused_seconds_total = %v, want 12", got)
	}
}

func TestTopicPauseEvents(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	m.TopicPaused("emails", "ESP migration", "ops")
	if got := value(t, scrape(t, reg), "shareq_topic_paused", "topic", "emails"); got != 1 {
		t.Errorf("topic_paused while paused = %v, want 1", got)
	}
	m.TopicResumed("emails", time.Minute)
	if got := value(t, scrape(t, reg), "shareq_topic_paused", "topic", "emails"); got != 0 {
		t.Errorf("topic_paused once resumed = %v, want 0", got)
	}
}

// A cancelled job (ACCEPTed without running) counts as
// shareq_jobs_total{outcome="cancelled",ack="accept"}, not as a success.
func TestJobFinishedCancelled(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	j := job("emails", 1)
	m.JobStarted(j)
	m.JobFinished(j, worker.Result{Outcome: worker.OutcomeCancelled, Ack: worker.AckAccept, Ran: true, Final: true, LockLeft: 25 * time.Second})
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_jobs_total", "topic", "emails", "outcome", "cancelled", "ack", "accept"); got != 1 {
		t.Errorf("jobs_total{outcome=cancelled} = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_jobs_total", "topic", "emails"); got != 1 {
		t.Errorf("jobs_total of the topic = %v, want the one cancelled", got)
	}
}

func TestJobFinished(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)

	ok1, ok2, retry, bad, late := job("emails", 1), job("emails", 1), job("emails", 1), job("emails", 1), job("emails", 3)
	for _, j := range []*handler.Job{ok1, ok2, retry, bad} {
		m.JobStarted(j)
	}
	m.JobStarted(job("sms", 1))

	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", "emails"); got != 4 {
		t.Errorf("in flight while running = %v, want 4", got)
	}

	m.JobFinished(ok1, worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Ran: true, Duration: 30 * time.Millisecond, LockLeft: 25 * time.Second})
	m.JobFinished(ok2, worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckAccept, Ran: true, Duration: 2 * time.Second, LockLeft: 1500 * time.Millisecond})
	m.JobFinished(retry, worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Err: errors.New("503"), Ran: true, Duration: 100 * time.Millisecond, LockLeft: 10 * time.Second})
	m.JobFinished(bad, worker.Result{Outcome: worker.OutcomeDiscarded, Ack: worker.AckReject, Err: handler.Permanent(errors.New("bad")), Ran: true, Duration: 5 * time.Millisecond, LockLeft: -3 * time.Second})
	// Released unrun: its lock had run out before a handler was free.
	m.JobFinished(late, worker.Result{Outcome: worker.OutcomeInterrupted, Ack: worker.AckRelease, Err: worker.ErrLockExpired, LockLeft: -200 * time.Millisecond})

	mfs = scrape(t, reg)
	for _, c := range []struct {
		outcome, ack string
		want         float64
	}{{"succeeded", "accept", 1}, {"parked", "accept", 1}, {"retried", "release", 1}, {"interrupted", "release", 1}, {"discarded", "reject", 1}} {
		if got := value(t, mfs, "shareq_jobs_total", "topic", "emails", "outcome", c.outcome, "ack", c.ack); got != c.want {
			t.Errorf("jobs_total{outcome=%q,ack=%q} = %v, want %v", c.outcome, c.ack, got, c.want)
		}
	}
	for _, c := range []struct {
		ack  string
		want float64
	}{{"accept", 2}, {"release", 2}, {"reject", 1}} {
		if got := value(t, mfs, "shareq_jobs_total", "topic", "emails", "ack", c.ack); got != c.want {
			t.Errorf("jobs_total{ack=%q} = %v, want %v", c.ack, got, c.want)
		}
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", "emails"); got != 0 {
		t.Errorf("in flight after all finished = %v, want 0", got)
	}
	if got := value(t, mfs, "shareq_jobs_in_flight", "topic", "sms"); got != 1 {
		t.Errorf("in flight of another topic = %v, want 1", got)
	}
	if got := value(t, mfs, "shareq_jobs_expired_total", "topic", "emails"); got != 1 {
		t.Errorf("jobs_expired_total = %v, want 1", got)
	}

	// Only the four jobs that ran are timed.
	d := histogram(t, mfs, "shareq_job_duration_seconds", "topic", "emails")
	if d.count != 4 || !near(d.sum, 2.135) {
		t.Errorf("duration count, sum = %d, %v; want 4, 2.135", d.count, d.sum)
	}
	if d.buckets[0.005] != 1 || d.buckets[0.05] != 2 || d.buckets[0.1] != 3 || d.buckets[2.5] != 4 {
		t.Errorf("duration buckets = %v", d.buckets)
	}

	// Every record counts its delivery.
	dc := histogram(t, mfs, "shareq_delivery_count", "topic", "emails")
	if dc.count != 5 || dc.sum != 7 || dc.buckets[1] != 4 || dc.buckets[2] != 4 || dc.buckets[3] != 5 || dc.buckets[10] != 5 {
		t.Errorf("delivery_count = %+v; want count 5, sum 7, le1 4, le3 5", dc)
	}
	if len(dc.buckets) != 10 {
		t.Errorf("delivery_count has %d buckets, want 10 (1..10)", len(dc.buckets))
	}

	// Run-out locks land in the lowest bucket and add nothing to the sum.
	ll := histogram(t, mfs, "shareq_lock_remaining_seconds", "topic", "emails")
	if ll.count != 5 || !near(ll.sum, 36.5) || ll.buckets[0] != 2 || ll.buckets[2] != 3 || ll.buckets[10] != 4 || ll.buckets[25] != 5 {
		t.Errorf("lock_remaining = %+v; want count 5, sum 36.5, le0 2, le2 3, le10 4, le25 5", ll)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestRenewalsAckErrors(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	j := job("images", 1)
	m.LockRenewed(j, nil)
	m.LockRenewed(j, nil)
	m.LockRenewed(j, errors.New("lost"))
	m.AckFailed("images", 3, errors.New("INVALID_RECORD_STATE"))
	m.AckFailed("images", 4, errors.New("INVALID_RECORD_STATE"))

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_lock_renewals_total Lock renewals of running jobs, by result (ok, error).
# TYPE shareq_lock_renewals_total counter
shareq_lock_renewals_total{result="error",topic="images"} 1
shareq_lock_renewals_total{result="ok",topic="images"} 2
# HELP shareq_ack_errors_total Acknowledgements the broker did not apply.
# TYPE shareq_ack_errors_total counter
shareq_ack_errors_total{topic="images"} 2
`), "shareq_lock_renewals_total", "shareq_ack_errors_total")
	if err != nil {
		t.Error(err)
	}
}

// Parked jobs are counted from the worker's report, by reason ("unknown"
// when it gives none); duplicates through the idempotency hook.
func TestParkedReportAndDuplicateHook(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)

	// The shape of the idempotency middleware's hook.
	var onDuplicate func(job *handler.Job, key string) = m.Duplicate

	parked := func(j *handler.Job, reason string) {
		res := worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckAccept, Ran: true}
		if reason != "" {
			res.Parked = &handler.DeadLetter{Topic: j.Topic + ".dlq", Reason: reason}
		}
		m.JobStarted(j)
		m.JobFinished(j, res)
	}
	parked(job("emails", 1), handler.ReasonDecode)
	parked(job("emails", 5), handler.ReasonDeliveryLimit)
	parked(job("emails", 5), handler.ReasonDeliveryLimit)
	parked(job("emails", 1), "")
	// A success is no park.
	m.JobFinished(job("emails", 1), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
	onDuplicate(job("emails", 2), "emails/0/1")

	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_jobs_parked_total Jobs parked in a dead-letter topic, by reason.
# TYPE shareq_jobs_parked_total counter
shareq_jobs_parked_total{reason="decode",topic="emails"} 1
shareq_jobs_parked_total{reason="delivery-limit",topic="emails"} 2
shareq_jobs_parked_total{reason="unknown",topic="emails"} 1
# HELP shareq_duplicates_suppressed_total Jobs accepted without running because their idempotency key was already claimed.
# TYPE shareq_duplicates_suppressed_total counter
shareq_duplicates_suppressed_total{topic="emails"} 1
`), "shareq_jobs_parked_total", "shareq_duplicates_suppressed_total")
	if err != nil {
		t.Error(err)
	}
}

func TestNoKeyInLabels(t *testing.T) {
	t.Parallel()
	reg, m := setup(t)
	driveEveryMethod(m)
	for name, mf := range scrape(t, reg) {
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if v := lp.GetValue(); strings.Contains(v, "user-123") || strings.Contains(v, "emails/0/1") {
					t.Errorf("%s has label %s=%q: a key or job ID", name, lp.GetName(), v)
				}
			}
		}
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opts []metrics.Option
		want string
	}{
		{"no duration buckets", []metrics.Option{metrics.DurationBuckets()}, "DurationBuckets: no buckets"},
		{"decreasing duration buckets", []metrics.Option{metrics.DurationBuckets(1, 0.5)}, "DurationBuckets([1 0.5]): buckets must increase"},
		{"repeated lock buckets", []metrics.Option{metrics.LockRemainingBuckets(0, 1, 1)}, "LockRemainingBuckets([0 1 1]): buckets must increase"},
		{"reserved const label", []metrics.Option{metrics.ConstLabels(prometheus.Labels{"topic": "x"})}, "register"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			_, err := metrics.New(reg, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New error = %v, want one containing %q", err, c.want)
			}
			if n := len(scrape(t, reg)); n != 0 {
				t.Errorf("%d families registered after a failed New", n)
			}
		})
	}
}

// A failed registration leaves nothing of the new Metrics behind, so the
// app can fix the conflict and try again.
func TestNewUnregistersOnConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	blocker := prometheus.NewGauge(prometheus.GaugeOpts{Name: "shareq_records_held",
		Help: "Records the worker holds: acquired and not yet acknowledged (running, buffered, or held for a retry backoff)."})
	reg.MustRegister(blocker)

	_, err := metrics.New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("New error = %v, want an AlreadyRegisteredError", err)
	}
	reg.Unregister(blocker)
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatalf("New after removing the conflict: %v", err)
	}
	if !m.Unregister(reg) {
		t.Error("Unregister reported metrics that were not registered")
	}
	if n := len(scrape(t, reg)); n != 0 {
		t.Errorf("%d families left after Unregister", n)
	}
}

// Two workers in one process share a registerer with distinct const labels.
func TestConstLabelsLetTwoWorkersShareARegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, err := metrics.New(reg, metrics.ConstLabels(prometheus.Labels{"worker": "a"}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := metrics.New(reg, metrics.ConstLabels(prometheus.Labels{"worker": "b"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg, metrics.ConstLabels(prometheus.Labels{"worker": "b"})); err == nil {
		t.Error("a second Metrics with the same const labels registered")
	}
	a.MemberStats(worker.MemberStats{State: "joined", Held: 2})
	b.MemberStats(worker.MemberStats{State: "joined", Held: 5})
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_records_held", "worker", "a"); got != 2 {
		t.Errorf("records_held{worker=a} = %v, want 2", got)
	}
	if got := value(t, mfs, "shareq_records_held", "worker", "b"); got != 5 {
		t.Errorf("records_held{worker=b} = %v, want 5", got)
	}
}

func TestNilRegistererCountsWithoutExporting(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	driveEveryMethod(m) // must not panic
	// The collectors are still free to register.
	reg := prometheus.NewRegistry()
	if m.Unregister(reg) {
		t.Error("Unregister found metrics registered with a registry never given to New")
	}
}

func TestCustomBuckets(t *testing.T) {
	t.Parallel()
	reg, m := setup(t, metrics.DurationBuckets(1, 60), metrics.LockRemainingBuckets(-1, 0, 1))
	j := job("emails", 1)
	m.JobStarted(j)
	m.JobFinished(j, worker.Result{Ack: worker.AckAccept, Ran: true, Duration: 90 * time.Second, LockLeft: -5 * time.Second})
	mfs := scrape(t, reg)
	d := histogram(t, mfs, "shareq_job_duration_seconds", "topic", "emails")
	if len(d.buckets) != 2 || d.buckets[60] != 0 || d.count != 1 {
		t.Errorf("duration = %+v, want buckets 1 and 60 and one sample above them", d)
	}
	ll := histogram(t, mfs, "shareq_lock_remaining_seconds", "topic", "emails")
	if ll.buckets[-1] != 0 || ll.buckets[0] != 1 {
		t.Errorf("lock_remaining = %+v, want the run-out lock clamped to 0", ll)
	}
}
