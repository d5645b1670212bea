package consolebrowser_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/worker"
)

// TestChartsInBrowser: a worker runs a steady load of jobs, one in ten
// failing for good (parked in the DLQ) and one in ten failing once
// (retried), with the job log writing every run to Postgres. An operator
// watches the group's chart page and then the topic's in Chromium,
// without touching them: each page reloads by itself (the console runs
// no script), and between two reloads the charts move (the lag chart's
// points and the runs chart's counts change). The pages hold no script.
func TestChartsInBrowser(t *testing.T) {
	chromium := browser(t)
	pool := migratedPool(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, group := topicAndGroup(t, c, shots, "invoices", "billing", 2)
	c.CreateTopic(t, topic+dlq.TopicSuffix, 1)
	cl := c.Client(t)
	quiet := slog.New(slog.DiscardHandler)

	jl, err := pgjoblog.New(pool, pgjoblog.FlushEvery(200*time.Millisecond), pgjoblog.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	stopLog := kafkatest.Run(t, jl.Run)
	defer stopLog()
	park, err := dlq.Middleware(cl, dlq.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(ctx context.Context, j *handler.Job) error {
		time.Sleep(80 * time.Millisecond) // a job takes a while: the lag builds up and comes down
		switch {
		case j.Offset%10 == 3:
			return handler.Permanent(errors.New("invoice total does not match its lines"))
		case j.Offset%10 == 7 && j.DeliveryCount == 1:
			return errors.New("tax service timed out")
		}
		return nil
	})
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h), worker.Use(park),
		worker.Concurrency(2), worker.RetryBackoff(func(int32) time.Duration { return 100 * time.Millisecond }),
		worker.Observers(jl), worker.Logger(quiet), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stopWorker := kafkatest.Run(t, w.Run)
	defer stopWorker()

	// The load: bursts of jobs until the test ends.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() { produceLoad(loadCtx, t, c, topic) })
	defer func() { stopLoad(); load.Wait() }()

	sm, err := console.NewSampler(cl, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	stopSampler := kafkatest.Run(t, sm.Run)
	defer stopSampler()
	hc, err := console.New(console.Client(cl), console.Charts(sm), console.Outbox(pool), console.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hc)
	defer srv.Close()

	ctx := startBrowser(t, chromium, 1000, 820)
	tb := tab{t, ctx}
	tb.do(chromedp.Navigate(srv.URL+"/groups/"+group+"/charts"), chromedp.WaitVisible(chromedp.CSS(`#chart-lag svg`)))
	watch := func(chart string, moved func(before, after chartState) bool) chartState {
		t.Helper()
		before := tb.chart(chart)
		for deadline := time.Now().Add(90 * time.Second); ; {
			after := tb.waitReload(chart)
			if moved(before, after) {
				return after
			}
			if time.Now().After(deadline) {
				tb.do(chromedp.Navigate(srv.URL + "/groups/" + group))
				t.Fatalf("%s did not move between reloads: %+v, then %+v; the group page reads:\n%s", chart, before, after, tb.text("main"))
			}
			before = after
		}
	}
	lag := watch("#chart-lag", func(b, a chartState) bool { return a.points > b.points && a.path != b.path })
	if shots != "" {
		// Some history for the screenshot: the lag's saw teeth, a burst
		// of jobs every 2 s, over most of the chart's first minute.
		for lag.points < 45 {
			lag = tb.waitReload("#chart-lag")
		}
	}
	watch("#chart-oldest", func(b, a chartState) bool { return a.points > 0 && a.path != b.path })
	if n := tb.count("script"); n != 0 {
		t.Errorf("the group's chart page has %d script elements, want none", n)
	}
	t.Logf("lag chart: %d points, latest %s", lag.points, lag.last)
	tb.do(screenshot(shots, "charts-group"))

	if forDocs(c, shots) {
		backfill(t, pool, topic) // an hour of runs behind the test's, for the screenshot
	}
	tb.do(chromedp.Navigate(srv.URL+"/topics"), chromedp.Click(chromedp.CSS(`a.chart-link[href="/topics/`+topic+`/charts"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-runs svg`)))
	runs := watch("#chart-runs", func(b, a chartState) bool { return a.series["parked"] > 0 && a.bars != b.bars })
	if runs.series["done"] == 0 || runs.series["failed"] == 0 {
		t.Errorf("runs chart %+v: want done, failed and parked runs", runs)
	}
	tb.do(chromedp.Click(chromedp.CSS(`p.ranges a[href$="range=24h"]`)), chromedp.WaitVisible(chromedp.CSS(`p.ranges strong`)))
	if got := tb.text("p.ranges strong"); got != "24h" {
		t.Errorf("after the 24h link the current range is %q", got)
	}
	tb.do(chromedp.Navigate(srv.URL+"/topics/"+topic+"/charts"), chromedp.WaitVisible(chromedp.CSS(`#chart-runs svg`)), screenshot(shots, "charts-topic"))
}

// chartState is what the test reads of a chart: its points, latest
// value, the lag path's shape, its bars' sizes and points per series.
type chartState struct {
	points int
	last   string
	path   string
	bars   string
	series map[string]int
}

// chart reads the chart css selects (its figure).
func (b tab) chart(css string) chartState {
	b.t.Helper()
	type raw struct {
		Points int            `json:"points"`
		Last   string         `json:"last"`
		Path   string         `json:"path"`
		Bars   string         `json:"bars"`
		Series map[string]int `json:"series"`
	}
	js := fmt.Sprintf(`(() => {
		const f = document.querySelector(%q), svg = f.querySelector("svg"), p = f.querySelector("path");
		const series = {};
		f.querySelectorAll("g.series").forEach(g => { series[g.dataset.series] = +g.dataset.points; });
		return {points: +svg.dataset.points, last: svg.dataset.last, path: p ? p.getAttribute("d") : "",
			bars: [...f.querySelectorAll("rect")].map(r => r.getAttribute("height")).join(","), series};
	})()`, css)
	r, err := chromedp.Run(b.ctx, chromedp.Evaluate[raw](js))
	if err != nil {
		b.t.Fatal(err)
	}
	return chartState{points: r.Points, last: r.Last, path: r.Path, bars: r.Bars, series: r.Series}
}

// waitReload marks the page's window, waits for the page to reload by
// itself (a new window has no mark) and reads the chart css selects.
// While the page reloads an evaluation can fail: it is tried again.
func (b tab) waitReload(css string) chartState {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.shareqMark = true`)); err != nil {
		b.t.Fatal(err)
	}
	reloaded := fmt.Sprintf(`!window.shareqMark && document.readyState === "complete" && !!document.querySelector(%q)`, css+" svg")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](reloaded))
		if err == nil && ok {
			return b.chart(css)
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the page did not reload by itself in 30 s (%v)", err)
		}
	}
}

// count returns the number of elements css selects.
func (b tab) count(css string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
	if err != nil {
		b.t.Fatal(err)
	}
	return n
}

// produceLoad produces a burst of jobs every 2 seconds until ctx ends,
// 10 to 50 of them (a wave): the worker, 25 jobs a second, takes a
// while over each.
func produceLoad(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string) {
	cl := c.Client(t)
	next := 0
	for n := 0; ; n++ {
		recs := make([]*kgo.Record, 30+int(20*math.Sin(float64(n)/3)))
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, `{"invoice":%d}`, next)}
			next++
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil && ctx.Err() == nil {
			t.Errorf("produce: %v", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// backfill writes an hour of runs of topic into the job log, as a
// worker would have: more each minute, one in 11 retried, one in 23
// parked. The job log must have made its partitions.
func backfill(t *testing.T, pool *pgxpool.Pool, topic string) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO shareq_job_runs (job_id, topic, partition, "offset", delivery_count, outcome, ack, started_at, ended_at, duration_us)
SELECT 'backfill-' || i, $1, 0, -i, 1,
    CASE WHEN i % 23 = 0 THEN 'parked' WHEN i % 11 = 0 THEN 'retried' ELSE 'succeeded' END, 'accept',
    at, at, 15000
FROM generate_series(1, 50000) i,
    LATERAL (SELECT now() - interval '1 hour' + power(i / 50000.0, 0.7) * interval '58 minutes' AS at) t`, topic)
	if err != nil {
		t.Fatal(err)
	}
}
