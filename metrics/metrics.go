package metrics

import (
	"time"

	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Namespace is the prefix of every metric name.
const Namespace = "shareq"

// Default histogram buckets, in seconds for the time histograms.
var (
	// DurationBucketsDefault are the buckets of shareq_job_duration_seconds:
	// 5 ms to 10 minutes, for jobs from a webhook call to a video encode.
	DurationBucketsDefault = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// LockRemainingBucketsDefault are the buckets of
	// shareq_lock_remaining_seconds. The 0 bucket counts records
	// acknowledged after their lock had run out.
	LockRemainingBucketsDefault = []float64{0, 0.5, 1, 2, 5, 10, 15, 20, 25, 30, 60, 120, 300}
	// DeliveryCountBuckets are the buckets of shareq_delivery_count: 1 to
	// 10, one per delivery; Kafka's default delivery limit is 5 and the
	// broker caps it at 10.
	DeliveryCountBuckets = prometheus.LinearBuckets(1, 1, 10)
)

// An Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	durationBuckets []float64
	lockBuckets     []float64
	constLabels     prometheus.Labels
	topics          []string
}

// DurationBuckets sets the buckets of shareq_job_duration_seconds, in
// seconds, increasing. Default [DurationBucketsDefault].
func DurationBuckets(b ...float64) Option {
	return optionFunc(func(c *config) { c.durationBuckets = b })
}

// LockRemainingBuckets sets the buckets of shareq_lock_remaining_seconds,
// in seconds, increasing. Keep a bucket at 0 to count acknowledgements
// sent after the lock ran out. Default [LockRemainingBucketsDefault].
func LockRemainingBuckets(b ...float64) Option {
	return optionFunc(func(c *config) { c.lockBuckets = b })
}

// ConstLabels adds labels with fixed values to every metric, for example
// {"worker": "thumbnails"} when one process runs several workers (each
// needs its own [Metrics] and distinct labels to share a registerer).
// Default: none.
func ConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *config) { c.constLabels = l })
}

// Topics creates the per-topic series of the counters at zero for the
// given topics, so that rate() and increase() see the first job of each
// topic rather than a series appearing at 1. Default: series appear when
// their first event happens.
func Topics(topics ...string) Option {
	return optionFunc(func(c *config) { c.topics = append(c.topics, topics...) })
}

// Metrics records a worker's events as Prometheus metrics (see the package
// documentation for the list). It implements [worker.Observer]: pass it to
// the worker with worker.Observers. Its [Metrics.Parked] and
// [Metrics.Duplicate] methods are hooks for the dlq and idempotency
// middleware. A Metrics is safe for concurrent use.
type Metrics struct {
	jobs         *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	renewals     *prometheus.CounterVec
	deliveries   *prometheus.HistogramVec
	ackErrors    *prometheus.CounterVec
	parked       *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	lockLeft     *prometheus.HistogramVec
	expired      *prometheus.CounterVec
	topicMissing *prometheus.GaugeVec
	recreated    *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	stalled      *prometheus.GaugeVec
	heals        *prometheus.CounterVec
	paused       *prometheus.GaugeVec
	pauses       *prometheus.CounterVec
	pausedFor    *prometheus.CounterVec
	topicPaused  *prometheus.GaugeVec
	member       *memberMetrics
	keys         *keyMetrics
}

var (
	_ worker.Observer       = (*Metrics)(nil)
	_ worker.TopicObserver  = (*Metrics)(nil)
	_ worker.MemberObserver = (*Metrics)(nil)
	_ worker.PauseObserver  = (*Metrics)(nil)

	_ worker.PausedTopicObserver = (*Metrics)(nil)
	_ worker.GrowthObserver      = (*Metrics)(nil)
	_ worker.StallObserver       = (*Metrics)(nil)
	_ worker.StallHealObserver   = (*Metrics)(nil)
	_ worker.KeyObserver         = (*Metrics)(nil)
)

// New creates the worker metrics and registers them with reg. It returns
// an error for an invalid option or when a metric cannot be registered
// (for example because another Metrics with the same const labels is
// already registered with reg); then nothing stays registered.
//
// A nil reg creates the metrics without registering them, like promauto.With(nil):
// the methods work and nothing is exported.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := &config{
		durationBuckets: DurationBucketsDefault,
		lockBuckets:     LockRemainingBucketsDefault,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if err := checkBuckets("DurationBuckets", c.durationBuckets); err != nil {
		return nil, err
	}
	if err := checkBuckets("LockRemainingBuckets", c.lockBuckets); err != nil {
		return nil, err
	}

	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: c.constLabels}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets, ConstLabels: c.constLabels}, labels)
	}
	m := &Metrics{
		jobs: counter("jobs_total",
			"Records acknowledged by the worker, by topic, outcome (succeeded, parked, retried, discarded, interrupted, cancelled, snoozed) and acknowledgement (accept, release, reject).", "topic", "outcome", "ack"),
		duration: histogram("job_duration_seconds",
			"How long handlers ran, in seconds, for records whose handler ran.", c.durationBuckets, "topic"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "jobs_in_flight",
			Help: "Handlers started and not yet acknowledged.", ConstLabels: c.constLabels}, []string{"topic"}),
		renewals: counter("lock_renewals_total",
			"Lock renewals of running jobs, by result (ok, error).", "topic", "result"),
		deliveries: histogram("delivery_count",
			"Delivery count of each acknowledged record (1 on the first delivery).", DeliveryCountBuckets, "topic"),
		ackErrors: counter("ack_errors_total",
			"Acknowledgements the broker did not apply.", "topic"),
		parked: counter("jobs_parked_total",
			"Jobs parked in a dead-letter topic, by reason.", "topic", "reason"),
		duplicates: counter("duplicates_suppressed_total",
			"Jobs accepted without running because their idempotency key was already claimed.", "topic"),
		lockLeft: histogram("lock_remaining_seconds",
			"Time left on a record's lock when it was acknowledged, in seconds; a lock that had run out counts as 0.", c.lockBuckets, "topic"),
		expired: counter("jobs_expired_total",
			"Records released without running because their lock had run out before a handler was free.", "topic"),
		topicMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "topic_missing",
			Help: "1 while a topic the worker consumes is deleted (its jobs are gone), else 0.", ConstLabels: c.constLabels}, []string{"topic"}),
		recreated: counter("topic_recreations_total",
			"Topics the worker consumes found deleted and re-created under a new ID; the worker consumes the new one.", "topic"),
		skipped: counter("partition_records_skipped_total",
			"Records (at most) the share group skipped on partitions added to the topic, found by the worker on Kafka before 4.4 (KAFKA-20742); the worker logs what to do.", "topic"),
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "partitions_stalled",
			Help: "Partitions of the topic assigned to the worker that records wait on and the broker gives none of (the share partition's in-flight limit reached behind a start offset that does not move); the worker logs what to do.", ConstLabels: c.constLabels}, []string{"topic"}),
		heals: counter("stall_heals_total",
			"Tries of worker.HealStalls at a stalled partition of the topic, by result: freed, still_stalled (restart the leader), skipped (nothing done; the worker's Warn line says why).", "topic", "result"),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "worker_paused",
			Help: "1 while the worker is paused because the dependency is down (a handler returned handler.Unavailable), else 0.", ConstLabels: c.constLabels}, []string{"dependency"}),
		pauses: counter("worker_pauses_total",
			"Times the worker paused because the dependency went down.", "dependency"),
		pausedFor: counter("worker_paused_seconds_total",
			"Seconds the worker spent paused because the dependency was down, counted when each pause ends.", "dependency"),
		topicPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "topic_paused",
			Help: "1 while an operator paused the topic (shareq pause, package control) and the worker applied it, else 0.", ConstLabels: c.constLabels}, []string{"topic"}),
	}
	m.member = newMemberMetrics(c.constLabels)
	m.keys = newKeyMetrics(c.constLabels)
	for _, t := range c.topics {
		for _, s := range jobSeries {
			m.jobs.WithLabelValues(t, s.outcome.String(), s.ack.String())
		}
		m.inFlight.WithLabelValues(t)
		m.topicPaused.WithLabelValues(t)
		m.renewals.WithLabelValues(t, "ok")
		m.renewals.WithLabelValues(t, "error")
		m.ackErrors.WithLabelValues(t)
		m.duplicates.WithLabelValues(t)
		m.expired.WithLabelValues(t)
		m.topicMissing.WithLabelValues(t)
		m.recreated.WithLabelValues(t)
		m.skipped.WithLabelValues(t)
		m.stalled.WithLabelValues(t)
		for _, r := range []string{worker.HealFreed, worker.HealStillStalled, worker.HealSkipped} {
			m.heals.WithLabelValues(t, r)
		}
		m.keys.withTopic(t)
	}
	if reg == nil {
		return m, nil
	}
	var done []prometheus.Collector
	for _, col := range m.collectors() {
		if err := reg.Register(col); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
		done = append(done, col)
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.jobs, m.duration, m.inFlight, m.renewals, m.deliveries,
		m.ackErrors, m.parked, m.duplicates, m.lockLeft, m.expired, m.topicMissing, m.recreated, m.skipped,
		m.stalled, m.heals, m.paused, m.pauses, m.pausedFor, m.topicPaused}
	cs = append(cs, m.keys.collectors()...)
	return append(cs, m.member.collectors()...)
}

// Unregister removes the metrics from reg, for an app that replaces its
// worker at run time. It reports whether all of them were registered.
func (m *Metrics) Unregister(reg prometheus.Registerer) bool {
	ok := true
	for _, col := range m.collectors() {
		ok = reg.Unregister(col) && ok
	}
	return ok
}

func checkBuckets(opt string, b []float64) error {
	if len(b) == 0 {
		return fmt.Errorf("metrics: %s: no buckets", opt)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			return fmt.Errorf("metrics: %s(%v): buckets must increase", opt, b)
		}
	}
	return nil
}

// JobStarted counts a running handler in shareq_jobs_in_flight.
func (m *Metrics) JobStarted(job *handler.Job) {
	m.inFlight.WithLabelValues(job.Topic).Inc()
}

// jobSeries are the outcome and ack pairs the worker reports, created at
// zero for each topic given with [Topics].
var jobSeries = []struct {
	outcome worker.Outcome
	ack     worker.Ack
}{
	{worker.OutcomeSucceeded, worker.AckAccept},
	{worker.OutcomeParked, worker.AckAccept},
	{worker.OutcomeRetried, worker.AckRelease},
	{worker.OutcomeDiscarded, worker.AckReject},
	{worker.OutcomeDiscarded, worker.AckRelease},
	{worker.OutcomeInterrupted, worker.AckRelease},
	{worker.OutcomeCancelled, worker.AckAccept},
	{worker.OutcomeSnoozed, worker.AckAccept},
}

// JobFinished records an acknowledged record: shareq_jobs_total,
// shareq_delivery_count and shareq_lock_remaining_seconds for every record;
// shareq_job_duration_seconds and shareq_jobs_in_flight for a record whose
// handler ran; shareq_jobs_expired_total for one whose handler did not run,
// unless it was snoozed.
func (m *Metrics) JobFinished(job *handler.Job, res worker.Result) {
	// shareq_jobs_total last: a scrape that counts a job finished sees
	// its delivery, duration and in-flight already recorded.
	defer m.jobs.WithLabelValues(job.Topic, res.Outcome.String(), res.Ack.String()).Inc()
	if res.Outcome == worker.OutcomeParked {
		// reason becomes a label value: the dlq middleware reports one of
		// the handler.Reason constants or a reason given to
		// handler.PermanentError, which must be few and fixed.
		reason := "unknown"
		if res.Parked != nil && res.Parked.Reason != "" {
			reason = res.Parked.Reason
		}
		m.parked.WithLabelValues(job.Topic, reason).Inc()
	}
	m.deliveries.WithLabelValues(job.Topic).Observe(float64(job.DeliveryCount))
	m.lockLeft.WithLabelValues(job.Topic).Observe(max(0, res.LockLeft.Seconds()))
	switch {
	case res.Ran:
		m.duration.WithLabelValues(job.Topic).Observe(res.Duration.Seconds())
		m.inFlight.WithLabelValues(job.Topic).Dec()
	case res.Outcome != worker.OutcomeSnoozed:
		// A job that waited for its key until MaxHold is snoozed without
		// running: copied for later and accepted, not expired.
		m.expired.WithLabelValues(job.Topic).Inc()
	}
}

// LockRenewed counts a lock renewal in shareq_lock_renewals_total.
func (m *Metrics) LockRenewed(job *handler.Job, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.renewals.WithLabelValues(job.Topic, result).Inc()
}

// AckFailed counts failed acknowledgements in shareq_ack_errors_total.
func (m *Metrics) AckFailed(topic string, _ int32, _ error) {
	m.ackErrors.WithLabelValues(topic).Inc()
}

// TopicMissing sets shareq_topic_missing for topic: 1 while it is
// deleted, 0 once it is back.
func (m *Metrics) TopicMissing(topic string, missing bool) {
	v := 0.0
	if missing {
		v = 1
	}
	m.topicMissing.WithLabelValues(topic).Set(v)
}

// TopicRecreated counts a topic found re-created under a new ID in
// shareq_topic_recreations_total.
func (m *Metrics) TopicRecreated(topic string) {
	m.recreated.WithLabelValues(topic).Inc()
}

// PartitionSkipped counts in shareq_partition_records_skipped_total the
// records the share group skipped on a partition added to topic.
func (m *Metrics) PartitionSkipped(topic string, _ int32, records int64) {
	m.skipped.WithLabelValues(topic).Add(float64(records))
}

// PartitionStalled adds one to shareq_partitions_stalled{topic} when a
// partition stalls, and takes it off when it moves again.
func (m *Metrics) PartitionStalled(topic string, _ int32, stalled bool) {
	if stalled {
		m.stalled.WithLabelValues(topic).Inc()
	} else {
		m.stalled.WithLabelValues(topic).Dec()
	}
}

// StallHealed adds one to shareq_stall_heals_total{topic,result} for a
// try of worker.HealStalls at a stalled partition of topic.
func (m *Metrics) StallHealed(topic string, _ int32, result string) {
	m.heals.WithLabelValues(topic, result).Inc()
}

// WorkerPaused sets shareq_worker_paused{dependency} to 1 and counts the
// pause in shareq_worker_pauses_total.
func (m *Metrics) WorkerPaused(dependency string, _ error) {
	m.paused.WithLabelValues(dependency).Set(1)
	m.pauses.WithLabelValues(dependency).Inc()
}

// WorkerResumed sets shareq_worker_paused{dependency} back to 0 and adds
// the pause's length to shareq_worker_paused_seconds_total.
func (m *Metrics) WorkerResumed(dependency string, down time.Duration, _ bool) {
	m.paused.WithLabelValues(dependency).Set(0)
	m.pausedFor.WithLabelValues(dependency).Add(down.Seconds())
}

// TopicPaused sets shareq_topic_paused{topic} to 1.
func (m *Metrics) TopicPaused(topic, _, _ string) { m.topicPaused.WithLabelValues(topic).Set(1) }

// TopicResumed sets shareq_topic_paused{topic} back to 0.
func (m *Metrics) TopicResumed(topic string, _ time.Duration) {
	m.topicPaused.WithLabelValues(topic).Set(0)
}

// Duplicate counts a job that the idempotency middleware accepted without
// running, in shareq_duplicates_suppressed_total. Its shape fits the
// idempotency middleware's hook:
//
//	claim, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
//
// The key is not recorded: a job key is never a label.
func (m *Metrics) Duplicate(job *handler.Job, _ string) {
	m.duplicates.WithLabelValues(job.Topic).Inc()
}
