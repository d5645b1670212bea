package outboxmetrics_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/shareq/shareq/metrics/outboxmetrics"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/scheduler"
)

type fakeScheduler struct{ s scheduler.Stats }

func (f fakeScheduler) Stats() scheduler.Stats { return f.s }

// Every counter of the scheduler's Stats, by app and schedule; the firing
// times only when there are some.
func TestSchedulerCollectorExports(t *testing.T) {
	t.Parallel()
	last := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	src := fakeScheduler{scheduler.Stats{App: "billing", Leading: true, Elections: 2, Errors: 1, Schedules: []scheduler.ScheduleStats{
		{Name: "invoices", Enqueued: 3, Duplicates: 1, Skipped: 2, EnqueueDelay: 1500 * time.Millisecond, EnqueueDelayCount: 3,
			LastFiring: last, NextFiring: last.Add(24 * time.Hour)},
		{Name: "new"},
	}}}
	c := outboxmetrics.NewSchedulerCollector(src, outboxmetrics.ConstLabels(prometheus.Labels{"instance": "a"}))
	want := `
# HELP shareq_scheduler_elections_total Times this process became its app's active scheduler.
# TYPE shareq_scheduler_elections_total counter
shareq_scheduler_elections_total{app="billing",instance="a"} 2
# HELP shareq_scheduler_enqueue_delay_seconds Time from each enqueued firing's time to its commit in the outbox.
# TYPE shareq_scheduler_enqueue_delay_seconds summary
shareq_scheduler_enqueue_delay_seconds_sum{app="billing",instance="a",schedule="invoices"} 1.5
shareq_scheduler_enqueue_delay_seconds_count{app="billing",instance="a",schedule="invoices"} 3
shareq_scheduler_enqueue_delay_seconds_sum{app="billing",instance="a",schedule="new"} 0
shareq_scheduler_enqueue_delay_seconds_count{app="billing",instance="a",schedule="new"} 0
# HELP shareq_scheduler_errors_total Database errors that ended a term of leading or of trying for the lock; the scheduler tries again by itself.
# TYPE shareq_scheduler_errors_total counter
shareq_scheduler_errors_total{app="billing",instance="a"} 1
# HELP shareq_scheduler_firings_total Firings by result: enqueued, duplicate (already enqueued, refused by its unique key), skipped (its job could not be built or encoded).
# TYPE shareq_scheduler_firings_total counter
shareq_scheduler_firings_total{app="billing",instance="a",result="duplicate",schedule="invoices"} 1
shareq_scheduler_firings_total{app="billing",instance="a",result="duplicate",schedule="new"} 0
shareq_scheduler_firings_total{app="billing",instance="a",result="enqueued",schedule="invoices"} 3
shareq_scheduler_firings_total{app="billing",instance="a",result="enqueued",schedule="new"} 0
shareq_scheduler_firings_total{app="billing",instance="a",result="skipped",schedule="invoices"} 2
shareq_scheduler_firings_total{app="billing",instance="a",result="skipped",schedule="new"} 0
# HELP shareq_scheduler_last_firing_timestamp_seconds Unix time of the latest firing this process enqueued or found enqueued.
# TYPE shareq_scheduler_last_firing_timestamp_seconds gauge
shareq_scheduler_last_firing_timestamp_seconds{app="billing",instance="a",schedule="invoices"} 1.796094e+09
# HELP shareq_scheduler_leading 1 while this process is its app's active scheduler (it holds the advisory lock), else 0.
# TYPE shareq_scheduler_leading gauge
shareq_scheduler_leading{app="billing",instance="a"} 1
# HELP shareq_scheduler_next_firing_timestamp_seconds Unix time of the schedule's next firing; only while this process leads.
# TYPE shareq_scheduler_next_firing_timestamp_seconds gauge
shareq_scheduler_next_firing_timestamp_seconds{app="billing",instance="a",schedule="invoices"} 1.7961804e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.CollectAndLint(c); err != nil || len(n) != 0 {
		t.Fatalf("lint: %v %v", n, err)
	}
}

// A real scheduler on Postgres: while it leads, the collector shows it
// leading, its firings enqueued with their delay, and the next firing;
// once stopped, not leading and no next firing.
func TestSchedulerCollector(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(pool, scheduler.App("metrics-"+schema), scheduler.Logger(slog.New(slog.DiscardHandler)),
		scheduler.Add(scheduler.Schedule{Name: "tick", Spec: scheduler.Every(100 * time.Millisecond), Topic: "ticks", Value: 1}))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(outboxmetrics.NewSchedulerCollector(s))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	mfs := waitScrape(t, reg, "two firings", func(mfs map[string]*dto.MetricFamily) bool {
		return series(mfs, "shareq_scheduler_firings_total", "result", "enqueued") >= 2
	})
	if gauge(mfs, "shareq_scheduler_leading") != 1 || gauge(mfs, "shareq_scheduler_elections_total") != 1 || gauge(mfs, "shareq_scheduler_errors_total") != 0 {
		t.Fatalf("while leading: %v", mfs)
	}
	if n := gauge(mfs, "shareq_scheduler_enqueue_delay_seconds"); n != series(mfs, "shareq_scheduler_firings_total", "result", "enqueued") {
		t.Fatalf("delay count %v, want one per enqueued firing", n)
	}
	if next := gauge(mfs, "shareq_scheduler_next_firing_timestamp_seconds"); next < float64(time.Now().Add(-time.Second).Unix()) {
		t.Fatalf("next firing %v", next)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mfs = scrape(t, reg)
	if gauge(mfs, "shareq_scheduler_leading") != 0 || gauge(mfs, "shareq_scheduler_next_firing_timestamp_seconds") != -1 || gauge(mfs, "shareq_scheduler_last_firing_timestamp_seconds") <= 0 {
		t.Fatalf("after Run: %v", mfs)
	}
}

// series returns the value of the series of a family whose label name is
// value, or -1.
func series(mfs map[string]*dto.MetricFamily, family, name, value string) float64 {
	for _, m := range mfs[family].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}
