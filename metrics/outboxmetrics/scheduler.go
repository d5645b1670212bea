package outboxmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/scheduler"
)

// SchedulerSource is what a [SchedulerCollector] reads: a periodic
// scheduler's counters. *scheduler.Scheduler implements it.
type SchedulerSource interface {
	Stats() scheduler.Stats
}

var _ SchedulerSource = (*scheduler.Scheduler)(nil)

// SchedulerCollector is a prometheus.Collector that exports a periodic
// scheduler's counters (package scheduler; see the metrics package
// documentation for the list). It reads the scheduler's Stats on each
// scrape, queries nothing, starts no goroutine and has nothing to stop.
// Safe for concurrent use. Its series carry the label app (the
// scheduler's [scheduler.App]), and those of one schedule the label
// schedule (its name: the schedules a process runs, a bounded set); two
// schedulers of one app need distinct [ConstLabels] on one registerer.
//
// The counters are this process's: every process of an app runs a
// scheduler, and only the active one fires. Sum the counters over the
// processes; max(shareq_scheduler_leading) by (app) is 1 while an app has
// an active scheduler.
type SchedulerCollector struct {
	src SchedulerSource

	leadingDesc, electionsDesc, errorsDesc *prometheus.Desc
	firingsDesc, delayDesc                 *prometheus.Desc
	lastDesc, nextDesc                     *prometheus.Desc
}

var _ prometheus.Collector = (*SchedulerCollector)(nil)

// NewSchedulerCollector returns a collector of src, normally a
// *scheduler.Scheduler. Of the options, only [ConstLabels] applies. It
// panics if src is nil (a programmer error).
func NewSchedulerCollector(src SchedulerSource, opts ...Option) *SchedulerCollector {
	if src == nil {
		panic("metrics: NewSchedulerCollector: nil SchedulerSource")
	}
	var cfg Collector
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(metrics.Namespace+"_scheduler_"+name, help, append([]string{"app"}, labels...), cfg.constLabels)
	}
	return &SchedulerCollector{
		src:           src,
		leadingDesc:   desc("leading", "1 while this process is its app's active scheduler (it holds the advisory lock), else 0."),
		electionsDesc: desc("elections_total", "Times this process became its app's active scheduler."),
		errorsDesc:    desc("errors_total", "Database errors that ended a term of leading or of trying for the lock; the scheduler tries again by itself."),
		firingsDesc: desc("firings_total", "Firings by result: enqueued, duplicate (already enqueued, refused by its unique key), skipped (its job could not be built or encoded).",
			"schedule", "result"),
		delayDesc: desc("enqueue_delay_seconds", "Time from each enqueued firing's time to its commit in the outbox.", "schedule"),
		lastDesc:  desc("last_firing_timestamp_seconds", "Unix time of the latest firing this process enqueued or found enqueued.", "schedule"),
		nextDesc:  desc("next_firing_timestamp_seconds", "Unix time of the schedule's next firing; only while this process leads.", "schedule"),
	}
}

// Describe sends the descriptors of the collector's metrics.
func (c *SchedulerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leadingDesc, c.electionsDesc, c.errorsDesc, c.firingsDesc, c.delayDesc, c.lastDesc, c.nextDesc} {
		ch <- d
	}
}

// Collect reads the scheduler's Stats and sends the metrics.
func (c *SchedulerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	leading := 0.0
	if s.Leading {
		leading = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leadingDesc, prometheus.GaugeValue, leading, s.App)
	ch <- prometheus.MustNewConstMetric(c.electionsDesc, prometheus.CounterValue, float64(s.Elections), s.App)
	ch <- prometheus.MustNewConstMetric(c.errorsDesc, prometheus.CounterValue, float64(s.Errors), s.App)
	for _, sc := range s.Schedules {
		ch <- prometheus.MustNewConstMetric(c.firingsDesc, prometheus.CounterValue, float64(sc.Enqueued), s.App, sc.Name, "enqueued")
		ch <- prometheus.MustNewConstMetric(c.firingsDesc, prometheus.CounterValue, float64(sc.Duplicates), s.App, sc.Name, "duplicate")
		ch <- prometheus.MustNewConstMetric(c.firingsDesc, prometheus.CounterValue, float64(sc.Skipped), s.App, sc.Name, "skipped")
		ch <- prometheus.MustNewConstSummary(c.delayDesc, sc.EnqueueDelayCount, sc.EnqueueDelay.Seconds(), nil, s.App, sc.Name)
		if !sc.LastFiring.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.lastDesc, prometheus.GaugeValue, unix(sc.LastFiring), s.App, sc.Name)
		}
		if !sc.NextFiring.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.nextDesc, prometheus.GaugeValue, unix(sc.NextFiring), s.App, sc.Name)
		}
	}
}

func unix(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
