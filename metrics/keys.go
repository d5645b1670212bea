package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shareq/shareq/worker"
)

// keyMetrics export the worker's key limits (worker.KeyLimit) and
// snoozes: three gauges from the member snapshots of
// [worker.MemberObserver], and the breakers' openings and closings by
// topic from [worker.KeyObserver]. No series has a key label: a worker
// may see any number of keys, and the series stay as few as its topics.
type keyMetrics struct {
	waiting prometheus.Gauge
	snoozed prometheus.Gauge
	open    prometheus.Gauge
	opened  *prometheus.CounterVec
	closed  *prometheus.CounterVec
	openFor *prometheus.CounterVec
}

func newKeyMetrics(labels prometheus.Labels) *keyMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels}, []string{"topic"})
	}
	return &keyMetrics{
		waiting: gauge("jobs_waiting_for_keys", "Jobs waiting for their keys' limits or open breakers (worker.KeyLimit), without a handler slot and spending no delivery."),
		snoozed: gauge("jobs_snoozed_held", "Snoozed jobs the worker holds until they are due, without a handler slot and spending no delivery."),
		open:    gauge("key_breakers_open", "Keys whose breaker is open in the worker: their jobs wait while one probes the key now and then."),
		opened:  counter("key_breakers_opened_total", "Times a key's breaker opened (handler.KeyUnavailable, or Keys.BreakAfter failures in a row), by topic."),
		closed:  counter("key_breakers_closed_total", "Times a key's breaker closed because a probe got through, by topic."),
		openFor: counter("key_breakers_open_seconds_total", "Seconds keys' breakers stayed open, counted when each closes, by topic."),
	}
}

func (km *keyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{km.waiting, km.snoozed, km.open, km.opened, km.closed, km.openFor}
}

// withTopic creates the topic's counters at zero ([Topics]).
func (km *keyMetrics) withTopic(topic string) {
	km.opened.WithLabelValues(topic)
	km.closed.WithLabelValues(topic)
	km.openFor.WithLabelValues(topic)
}

// stats sets the gauges from a member snapshot.
func (km *keyMetrics) stats(s worker.MemberStats) {
	km.waiting.Set(float64(s.Waiting))
	km.snoozed.Set(float64(s.Snoozed))
	km.open.Set(float64(s.BreakersOpen))
}

// KeyDown counts a key's breaker opening in
// shareq_key_breakers_opened_total{topic}. The key is not recorded: a
// key is never a label.
func (m *Metrics) KeyDown(topic, _ string, _ error) {
	m.keys.opened.WithLabelValues(topic).Inc()
}

// KeyBack counts a key's breaker closing in
// shareq_key_breakers_closed_total{topic} and adds how long it was open
// to shareq_key_breakers_open_seconds_total{topic}.
func (m *Metrics) KeyBack(topic, _ string, down time.Duration) {
	m.keys.closed.WithLabelValues(topic).Inc()
	m.keys.openFor.WithLabelValues(topic).Add(down.Seconds())
}
