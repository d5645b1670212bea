package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shareq/shareq/worker"
)

// memberStates are the values of shareq_member_state's state label.
var memberStates = []string{"joining", "joined", "fenced", "left"}

// memberMetrics export the worker's share-group member from the snapshots
// of [worker.MemberObserver]. The counters of a snapshot are totals since
// the worker's Run started; each snapshot adds what grew since the last.
type memberMetrics struct {
	state      *prometheus.GaugeVec
	partitions prometheus.Gauge
	held       prometheus.Gauge
	heldBytes  prometheus.Gauge
	buffered   prometheus.Gauge
	fetchRTT   prometheus.Gauge
	fetches    prometheus.Counter
	fetched    prometheus.Counter
	lost       prometheus.Counter
	opened     prometheus.Counter
	reset      prometheus.Counter
	rejoins    prometheus.Counter
	acks       *prometheus.CounterVec
	rateLimit  *prometheus.GaugeVec // worker.TopicRate, by topic
	rateShare  *prometheus.GaugeVec

	mu   sync.Mutex
	last worker.MemberStats
}

func newMemberMetrics(labels prometheus.Labels) *memberMetrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help, ConstLabels: labels})
	}
	return &memberMetrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "member_state",
			Help: "1 for the state the worker's share-group member is in (joining, joined, fenced, left), 0 for the others.", ConstLabels: labels}, []string{"state"}),
		partitions: gauge("member_partitions", "Partitions assigned to the worker's share-group member."),
		held:       gauge("records_held", "Records the worker holds: acquired and not yet acknowledged (running, buffered, or held for a retry backoff)."),
		heldBytes:  gauge("records_held_bytes", "Bytes (keys, values and headers) of the records whose jobs have not ended; worker.MaxBytesInHand bounds them."),
		buffered:   gauge("records_buffered", "Records fetched ahead of free handler slots, waiting for one."),
		fetchRTT:   gauge("fetch_rtt_seconds", "Round trip of share fetches that returned records, in seconds (moving average)."),
		fetches:    counter("fetches_total", "Share fetches the brokers answered."),
		fetched:    counter("records_fetched_total", "Records acquired by share fetches."),
		lost:       counter("records_lost_total", "Held records whose lock was lost (share session or connection gone); another member may run them."),
		opened:     counter("sessions_opened_total", "Share sessions opened with a broker, the first ones included."),
		reset:      counter("sessions_reset_total", "Share sessions reopened after an error."),
		rejoins:    counter("member_rejoins_total", "Times the member rejoined the share group after the coordinator fenced it."),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "acks_total",
			Help: "Acknowledgements the broker applied, by type (accept, release, reject).", ConstLabels: labels}, []string{"ack"}),
		rateLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "rate_limit_jobs_per_second",
			Help: "The topic's rate limit (worker.TopicRate) for the whole share group, in jobs per second.", ConstLabels: labels}, []string{"topic"}),
		rateShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "rate_share_jobs_per_second",
			Help: "This worker's share of the topic's rate limit, in jobs per second (0 while it waits to be counted).", ConstLabels: labels}, []string{"topic"}),
	}
}

func (mm *memberMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{mm.state, mm.partitions, mm.held, mm.heldBytes, mm.buffered, mm.fetchRTT,
		mm.fetches, mm.fetched, mm.lost, mm.opened, mm.reset, mm.rejoins, mm.acks, mm.rateLimit, mm.rateShare}
}

// MemberStats sets the member metrics from a snapshot of the worker's
// share-group member (see the package documentation for the list).
func (m *Metrics) MemberStats(s worker.MemberStats) {
	m.keys.stats(s)
	mm := m.member
	mm.mu.Lock()
	defer mm.mu.Unlock()
	for _, st := range memberStates {
		v := 0.0
		if st == s.State {
			v = 1
		}
		mm.state.WithLabelValues(st).Set(v)
	}
	mm.partitions.Set(float64(s.Partitions))
	mm.held.Set(float64(s.Held))
	mm.heldBytes.Set(float64(s.HeldBytes))
	mm.buffered.Set(float64(s.Buffered))
	mm.fetchRTT.Set(s.FetchRTT.Seconds())
	if s.RateTopic != "" {
		mm.rateLimit.WithLabelValues(s.RateTopic).Set(s.RateLimit)
		mm.rateShare.WithLabelValues(s.RateTopic).Set(s.RateShare)
	}

	last := mm.last
	if s.Fetches < last.Fetches || s.SessionsOpened < last.SessionsOpened { // a new Run: its counters start at 0
		last = worker.MemberStats{}
	}
	add := func(c prometheus.Counter, now, before int64) {
		if now > before {
			c.Add(float64(now - before))
		}
	}
	add(mm.fetches, s.Fetches, last.Fetches)
	add(mm.fetched, s.Fetched, last.Fetched)
	add(mm.lost, s.LostRecords, last.LostRecords)
	add(mm.opened, s.SessionsOpened, last.SessionsOpened)
	add(mm.reset, s.SessionsReset, last.SessionsReset)
	add(mm.rejoins, s.Rejoins, last.Rejoins)
	for _, a := range []worker.Ack{worker.AckAccept, worker.AckRelease, worker.AckReject} {
		if s.Acks[a] > last.Acks[a] {
			mm.acks.WithLabelValues(a.String()).Add(float64(s.Acks[a] - last.Acks[a]))
		}
	}
	mm.last = s
}
