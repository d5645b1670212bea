package outboxmetrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/metrics/outboxmetrics"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// The relay families, with the scrape error counter.
var relayFamilies = []string{
	"shareq_outbox_rows", "shareq_outbox_rows_scheduled", "shareq_outbox_rows_failing", "shareq_outbox_oldest_row_age_seconds",
	"shareq_relay_produced_total", "shareq_relay_failures_total", "shareq_relay_db_errors_total", "shareq_relay_due_delay_seconds",
	"shareq_outbox_scrape_errors_total",
}

// waitScrape scrapes reg until cond holds of a scrape, and returns it.
func waitScrape(t *testing.T, reg prometheus.Gatherer, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mfs := scrape(t, reg)
		if cond(mfs) {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last scrape: %v", what, mfs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gauge returns the value of the (unlabelled) series of a family, or -1
// when it is missing.
func gauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	var m *dto.Metric
	if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
		m = mf.GetMetric()[0]
	}
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	default:
		return m.GetGauge().GetValue()
	}
}

// A relay on real Postgres and a broker: the backlog gauges count the
// committed rows, the one that fails and the oldest's age; the counters
// follow the relay; a backlog query that fails drops the gauges from the
// scrape and counts a scrape error, and the counters stay.
func TestRelayCollector(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 8)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	c := kafkatest.New(t)
	topic, missing := c.Topic(t, 1), kafkatest.Name(t, "missing")

	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgoutbox.EnqueueManyTx(t.Context(), tx,
		enqueue.NewJob(topic, "a"), enqueue.NewJob(topic, "b"), enqueue.NewJob(topic, "c"),
		enqueue.NewJob(missing, "never relayed"))
	if err != nil {
		t.Fatal(err)
	}
	// An hour old, so that the age is known whatever the box's speed.
	if _, err := tx.Exec(t.Context(), "UPDATE "+pgoutbox.Table+" SET created_at = now() - interval '1 hour', due_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	// And one for tomorrow: scheduled, not ageing, not relayed.
	if _, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, "tomorrow"), pgoutbox.In(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}

	relay, err := pgoutbox.NewRelay(pool, c.Client(t, enqueue.ProducerOpts()...),
		pgoutbox.PollInterval(100*time.Millisecond), pgoutbox.RetryBackoff(50*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxmetrics.NewCollector(relay, outboxmetrics.MinInterval(0), outboxmetrics.Logger(quietLogger())))

	mfs := scrape(t, reg)
	for _, name := range relayFamilies {
		if mfs[name] == nil {
			t.Errorf("no family %s before the relay ran", name)
		}
	}
	if rows, failing, age := gauge(mfs, "shareq_outbox_rows"), gauge(mfs, "shareq_outbox_rows_failing"),
		gauge(mfs, "shareq_outbox_oldest_row_age_seconds"); rows != 5 || failing != 0 || age < 3600 || age > 2*3600 {
		t.Errorf("before the relay ran: rows %v, failing %v, oldest age %vs; want 5, 0, an hour", rows, failing, age)
	}
	if s := gauge(mfs, "shareq_outbox_rows_scheduled"); s != 1 {
		t.Errorf("scheduled rows %v, want 1", s)
	}
	if p, f := gauge(mfs, "shareq_relay_produced_total"), gauge(mfs, "shareq_relay_failures_total"); p != 0 || f != 0 {
		t.Errorf("before the relay ran: produced %v, failures %v; want 0, 0", p, f)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			t.Errorf("Relay.Run: %v", err)
		}
	})
	mfs = waitScrape(t, reg, "the good jobs relayed and the bad one failing", func(mfs map[string]*dto.MetricFamily) bool {
		return gauge(mfs, "shareq_relay_produced_total") == 3 && gauge(mfs, "shareq_relay_failures_total") >= 1 &&
			gauge(mfs, "shareq_outbox_rows") == 2 && gauge(mfs, "shareq_outbox_rows_failing") == 1
	})
	// The three produced jobs were due an hour before their produce.
	if sum := mfs["shareq_relay_due_delay_seconds"].GetMetric()[0].GetSummary(); sum.GetSampleCount() != 3 || sum.GetSampleSum() < 3*3600 {
		t.Errorf("due delay summary count %d, sum %vs; want 3 jobs an hour late each", sum.GetSampleCount(), sum.GetSampleSum())
	}
	if age := gauge(mfs, "shareq_outbox_oldest_row_age_seconds"); age < 3600 {
		t.Errorf("oldest age %vs with the failing row waiting, want its hour", age)
	}
	cancel()
	wg.Wait()

	// The database goes away: the backlog cannot be read.
	pool.Close()
	mfs = scrape(t, reg)
	for _, name := range []string{"shareq_outbox_rows", "shareq_outbox_rows_scheduled", "shareq_outbox_rows_failing", "shareq_outbox_oldest_row_age_seconds"} {
		if mfs[name] != nil {
			t.Errorf("%s exported from a failed reading; want it left out", name)
		}
	}
	if n := gauge(mfs, "shareq_outbox_scrape_errors_total"); n != 1 {
		t.Errorf("scrape errors = %v, want 1", n)
	}
	if p := gauge(mfs, "shareq_relay_produced_total"); p != 3 {
		t.Errorf("produced = %v after a failed backlog reading, want the relay's 3", p)
	}

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// fakeRelay is a Source whose readings a test sets.
type fakeRelay struct {
	stats   atomic.Pointer[pgoutbox.Stats]
	backlog pgoutbox.Backlog
	err     error
	queries atomic.Int64
}

func (f *fakeRelay) Stats() pgoutbox.Stats { return *f.stats.Load() }

func (f *fakeRelay) Backlog(ctx context.Context) (pgoutbox.Backlog, error) {
	f.queries.Add(1)
	return f.backlog, f.err
}

// Within the minimum interval the backlog is queried once; the counters
// are read on every scrape. Stats map to their counters one to one.
func TestRelayCollectorCachesTheBacklogNotTheCounters(t *testing.T) {
	t.Parallel()
	f := &fakeRelay{backlog: pgoutbox.Backlog{Rows: 7, Scheduled: 4, Failing: 2, OldestAge: 1500 * time.Millisecond}}
	f.stats.Store(&pgoutbox.Stats{Produced: 10, Failures: 3, DBErrors: 2, DueDelay: 2500 * time.Millisecond, DueDelayCount: 9})
	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxmetrics.NewCollector(f, outboxmetrics.MinInterval(time.Hour)))

	mfs := scrape(t, reg)
	for name, want := range map[string]float64{
		"shareq_outbox_rows": 7, "shareq_outbox_rows_scheduled": 4, "shareq_outbox_rows_failing": 2, "shareq_outbox_oldest_row_age_seconds": 1.5,
		"shareq_relay_due_delay_seconds": 9,
		"shareq_relay_produced_total":    10, "shareq_relay_failures_total": 3, "shareq_relay_db_errors_total": 2,
		"shareq_outbox_scrape_errors_total": 0,
	} {
		if got := value(t, mfs, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if sum := mfs["shareq_relay_due_delay_seconds"].GetMetric()[0].GetSummary().GetSampleSum(); sum != 2.5 {
		t.Errorf("due delay sum = %v, want 2.5", sum)
	}
	f.stats.Store(&pgoutbox.Stats{Produced: 11, Failures: 3, DBErrors: 5})
	for range 4 {
		mfs = scrape(t, reg)
	}
	if n := f.queries.Load(); n != 1 {
		t.Errorf("%d backlog queries for 5 scrapes within the interval, want 1", n)
	}
	if p, d := value(t, mfs, "shareq_relay_produced_total"), value(t, mfs, "shareq_relay_db_errors_total"); p != 11 || d != 5 {
		t.Errorf("produced %v, db errors %v; want the newest 11, 5", p, d)
	}
}

// A failed query is reused for the interval too: one error, however many
// scrapes.
func TestRelayCollectorCountsOneErrorPerFailedQuery(t *testing.T) {
	t.Parallel()
	f := &fakeRelay{err: errors.New("connection refused")}
	f.stats.Store(&pgoutbox.Stats{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxmetrics.NewCollector(f, outboxmetrics.MinInterval(time.Hour), outboxmetrics.Logger(quietLogger())))
	var mfs map[string]*dto.MetricFamily
	for range 3 {
		mfs = scrape(t, reg)
	}
	if n := value(t, mfs, "shareq_outbox_scrape_errors_total"); n != 1 {
		t.Errorf("scrape errors = %v, want 1", n)
	}
	if mfs["shareq_outbox_rows"] != nil {
		t.Errorf("rows exported from a failed query")
	}
}

// Two relays of one process share a registry with distinct const labels.
func TestRelayCollectorsShareARegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		f := &fakeRelay{}
		f.stats.Store(&pgoutbox.Stats{})
		if err := reg.Register(outboxmetrics.NewCollector(f, outboxmetrics.ConstLabels(prometheus.Labels{"relay": name}))); err != nil {
			t.Fatalf("register relay %s: %v", name, err)
		}
	}
	mfs := scrape(t, reg)
	if n := len(mfs["shareq_relay_produced_total"].GetMetric()); n != 2 {
		t.Errorf("%d produced series, want one per relay", n)
	}
}

// scrape gathers reg and returns the metric families by name.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// value is gauge that fails t when the series is missing.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	v := gauge(mfs, name)
	if v < 0 {
		t.Fatalf("%s: no such series", name)
	}
	return v
}
