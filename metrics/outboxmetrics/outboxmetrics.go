// Package outboxmetrics exports a transactional outbox relay
// (enqueue/pgoutbox) and a periodic scheduler (package scheduler) as
// Prometheus metrics. It is a package of its own so that the metrics
// package, which every worker may import, does not pull in pgx.
//
// [NewCollector] returns a prometheus.Collector for a relay (any
// [Source]): it reads the relay's counters on every scrape, and the outbox
// table's backlog (one aggregate query) at most once per [MinInterval]:
//
//	reg.MustRegister(outboxmetrics.NewCollector(relay))
//
// [NewSchedulerCollector] does the same for a periodic scheduler (package
// scheduler), from its Stats, so that the scheduler module imports no
// Prometheus:
//
//	reg.MustRegister(outboxmetrics.NewSchedulerCollector(sched))
//
// See the metrics package documentation for the metric list.
package outboxmetrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/metrics"
)

// Defaults for the options of [NewCollector].
const (
	// TimeoutDefault bounds the backlog query of one scrape.
	TimeoutDefault = 5 * time.Second
	// MinIntervalDefault is how long a backlog reading is reused
	// before a scrape queries the outbox table again.
	MinIntervalDefault = 5 * time.Second
)

// Source is what a [Collector] reads: a relay's counters and
// the outbox table's backlog. *pgoutbox.Relay implements it.
type Source interface {
	Stats() pgoutbox.Stats
	Backlog(ctx context.Context) (pgoutbox.Backlog, error)
}

var _ Source = (*pgoutbox.Relay)(nil)

// A Option configures [NewCollector].
type Option interface{ apply(*Collector) }

type optionFunc func(*Collector)

func (f optionFunc) apply(c *Collector) { f(c) }

// Timeout bounds each backlog query; a query that takes longer
// counts as a scrape error. 0 or less means the default,
// [TimeoutDefault].
func Timeout(d time.Duration) Option {
	return optionFunc(func(c *Collector) { c.timeout = d })
}

// MinInterval sets how long a backlog reading (or a failure) is
// reused: scrapes within d of the last query export the same backlog
// without querying again. The counters are read on every scrape. 0
// queries on every scrape. Default [MinIntervalDefault].
func MinInterval(d time.Duration) Option {
	return optionFunc(func(c *Collector) { c.minInterval = d })
}

// ConstLabels adds labels with fixed values to every metric of the
// collector, for a process that runs several relays on one registerer
// (each needs distinct labels). Default: none.
func ConstLabels(l prometheus.Labels) Option {
	return optionFunc(func(c *Collector) { c.constLabels = l })
}

// Logger sets the logger for failed backlog readings (Warn). Default
// slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *Collector) { c.log = l })
}

// Collector is a prometheus.Collector that exports a transactional
// outbox relay's counters and the outbox table's backlog (see the package
// documentation for the list). On each scrape it reads the relay's Stats,
// and queries the backlog at most once per [MinInterval], with a
// [Timeout]. It starts no goroutine and has nothing to stop. Make one
// with [NewCollector] and register it with a registry. Safe for
// concurrent use; concurrent scrapes share one query.
//
// A failed backlog query does not fail the scrape: it adds one to
// shareq_outbox_scrape_errors_total, is logged, and the backlog gauges
// are left out of the scrape until a query succeeds. The counters are
// exported either way.
//
// The counters are the relay's, since it was created; the backlog is the
// table's, shared by every relay on it: when several processes run a
// relay, sum the counters over them and take the max (not the sum) of
// the backlog gauges.
type Collector struct {
	src         Source
	timeout     time.Duration
	minInterval time.Duration
	constLabels prometheus.Labels
	log         *slog.Logger
	now         func() time.Time

	rowsDesc      *prometheus.Desc
	scheduledDesc *prometheus.Desc
	failingDesc   *prometheus.Desc
	dueDelayDesc  *prometheus.Desc
	ageDesc       *prometheus.Desc
	producedDesc  *prometheus.Desc
	failuresDesc  *prometheus.Desc
	dbErrorsDesc  *prometheus.Desc
	errors        prometheus.Counter

	mu      sync.Mutex
	fetched time.Time // zero until the first reading
	backlog []prometheus.Metric
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector of src, normally a
// *pgoutbox.Relay. It panics if src is nil (a programmer error).
func NewCollector(src Source, opts ...Option) *Collector {
	if src == nil {
		panic("metrics: NewCollector: nil Source")
	}
	c := &Collector{
		src:         src,
		timeout:     TimeoutDefault,
		minInterval: MinIntervalDefault,
		log:         slog.Default(),
		now:         time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.timeout <= 0 {
		c.timeout = TimeoutDefault
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(metrics.Namespace+"_"+name, help, nil, c.constLabels)
	}
	c.rowsDesc = desc("outbox_rows", "Committed jobs in the outbox table not yet relayed to Kafka, due or not.")
	c.scheduledDesc = desc("outbox_rows_scheduled", "Jobs in the outbox table not due yet (pgoutbox.At, pgoutbox.In).")
	c.failingDesc = desc("outbox_rows_failing", "Jobs in the outbox table whose produce has failed at least once; they are retried with backoff.")
	c.ageDesc = desc("outbox_oldest_row_age_seconds", "How long the job due longest in the outbox table has been due; 0 when none is due.")
	c.producedDesc = desc("relay_produced_total", "Jobs the relay produced, had acknowledged by the broker and deleted from the outbox.")
	c.failuresDesc = desc("relay_failures_total", "Produce failures of jobs; each such job stays in the outbox and is retried.")
	c.dbErrorsDesc = desc("relay_db_errors_total", "Relay rounds and listening connections that failed on Postgres; the relay retries by itself.")
	c.dueDelayDesc = desc("relay_due_delay_seconds", "Time from each produced job's due time to its delete after the broker's acknowledgement.")
	c.errors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace:   metrics.Namespace,
		Name:        "outbox_scrape_errors_total",
		Help:        "Failed readings of the outbox table's backlog.",
		ConstLabels: c.constLabels,
	})
	return c
}

// Describe sends the descriptors of the collector's metrics.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rowsDesc
	ch <- c.scheduledDesc
	ch <- c.failingDesc
	ch <- c.ageDesc
	ch <- c.producedDesc
	ch <- c.failuresDesc
	ch <- c.dbErrorsDesc
	ch <- c.dueDelayDesc
	c.errors.Describe(ch)
}

// Collect reads the relay's counters and the backlog, or reuses a backlog
// reading younger than [MinInterval], and sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if now := c.now(); c.fetched.IsZero() || now.Sub(c.fetched) >= c.minInterval {
		c.backlog = c.read()
		c.fetched = c.now()
	}
	ms := c.backlog
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	s := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.producedDesc, prometheus.CounterValue, float64(s.Produced))
	ch <- prometheus.MustNewConstMetric(c.failuresDesc, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(c.dbErrorsDesc, prometheus.CounterValue, float64(s.DBErrors))
	ch <- prometheus.MustNewConstSummary(c.dueDelayDesc, s.DueDelayCount, s.DueDelay.Seconds(), nil)
	ch <- c.errors
}

// read queries the backlog and returns its gauges; it counts and logs a
// failure.
func (c *Collector) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	b, err := c.src.Backlog(ctx)
	if err != nil {
		c.errors.Inc()
		c.log.Warn("shareq: reading the outbox backlog", "error", err)
		return nil
	}
	return []prometheus.Metric{
		prometheus.MustNewConstMetric(c.rowsDesc, prometheus.GaugeValue, float64(b.Rows)),
		prometheus.MustNewConstMetric(c.scheduledDesc, prometheus.GaugeValue, float64(b.Scheduled)),
		prometheus.MustNewConstMetric(c.failingDesc, prometheus.GaugeValue, float64(b.Failing)),
		prometheus.MustNewConstMetric(c.ageDesc, prometheus.GaugeValue, b.OldestAge.Seconds()),
	}
}
