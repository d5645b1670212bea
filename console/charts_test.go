package console_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

// runSampler runs s until t ends.
func runSampler(t *testing.T, s *console.Sampler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Sampler.Run: %v", err)
		}
	})
}

// getPage fetches path and returns the status, the Refresh header and
// the body.
func (b *bundle) getPage(t *testing.T, path string) (int, string, string) {
	t.Helper()
	resp, err := b.http.Get(b.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Refresh"), string(body)
}

var chartAttrsRE = regexp.MustCompile(`<figure class="chart" id="([^"]+)">.*?data-points="(\d+)" data-last="([^"]*)"`)

// chartsOf returns the points and the latest value of each chart of a
// page, by the figure's id.
func chartsOf(body string) map[string][2]string {
	out := map[string][2]string{}
	for _, m := range chartAttrsRE.FindAllStringSubmatch(body, -1) {
		out[m[1]] = [2]string{m[2], m[3]}
	}
	return out
}

// The group's charts show what the sampler saw: the lag of the jobs
// produced and not done, and how long the oldest of them has waited.
// The chart page reloads itself at the sampler's step; the group page,
// with its forms, does not.
func TestGroupChartsShowTheSamples(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.joinGroup(t) // one job done: the group's start offset is 1
	sm, err := console.NewSampler(b.cl, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b.serve(t, console.Charts(sm))
	old := time.Now().Add(-90 * time.Second)
	for i := range 5 {
		b.c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte(`{"n":2}`), Timestamp: old.Add(time.Duration(i) * time.Second)})
	}
	code, refresh, body := b.getPage(t, "/groups/"+b.group+"/charts")
	if code != http.StatusOK {
		t.Fatalf("charts: %d\n%s", code, body)
	}
	if refresh != "1" {
		t.Errorf("Refresh %q, want 1 (the sampler's step)", refresh)
	}
	mustContain(t, "charts before sampling", body, "No samples of this group yet", `href="/groups/`+b.group+`/charts?range=24h"`, `<strong aria-current="true">1h</strong>`)
	runSampler(t, sm)
	// The oldest job waiting was produced 90 s ago (its timestamp).
	about90s := regexp.MustCompile(`^(9\d|1\d\d)(\.\d)?s$|^[23](\.\d)?m$`)
	deadline := time.Now().Add(60 * time.Second)
	var charts map[string][2]string
	for {
		_, _, body = b.getPage(t, "/groups/"+b.group+"/charts")
		charts = chartsOf(body)
		if charts["chart-lag"][1] == "5" && about90s.MatchString(charts["chart-oldest"][1]) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if charts["chart-lag"][1] != "5" {
		t.Fatalf("lag chart %v, want the latest lag 5\n%s", charts["chart-lag"], body)
	}
	if age := charts["chart-oldest"][1]; !about90s.MatchString(age) {
		t.Errorf("oldest chart's latest %q, want about 90s", age)
	}
	code, refresh, body = b.getPage(t, "/groups/"+b.group)
	if code != http.StatusOK || refresh != "" {
		t.Fatalf("group page: %d, Refresh %q (want none: the page has forms)", code, refresh)
	}
	if c := chartsOf(body); c["chart-lag"][0] == "0" || c["chart-oldest"][0] == "0" {
		t.Errorf("group page charts %v, want points", c)
	}
	mustContain(t, "group page", body, `id="watch-charts"`, "watch (reloads every 1s)")
	code, _, body = b.getPage(t, "/groups/"+b.group+"/charts?range=24h")
	if code != http.StatusOK {
		t.Fatalf("day: %d", code)
	}
	if c := chartsOf(body); c["chart-lag"][1] != "5" {
		t.Errorf("day's lag chart %v, want the latest lag 5", c["chart-lag"])
	}
	mustContain(t, "day", body, `<strong aria-current="true">24h</strong>`, "over the last day")
	if code, _, _ := b.getPage(t, "/groups/"+b.group+"/charts?range=week"); code != http.StatusBadRequest {
		t.Errorf("range=week: %d, want 400", code)
	}
}

// Without a sampler the group's charts say so; without a database the
// topic's say there is no job log. Neither fails the page.
func TestChartsWithoutSamplerOrDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.joinGroup(t)
	code, _, body := b.getPage(t, "/groups/"+b.group)
	if code != http.StatusOK {
		t.Fatalf("group: %d\n%s", code, body)
	}
	mustContain(t, "group", body, "No charts of lag over time: this console samples nothing")
	if strings.Contains(body, "chart-lag") {
		t.Errorf("the group page without a sampler draws the empty lag chart:\n%s", body)
	}
	code, _, body = b.getPage(t, "/groups/"+b.group+"/charts")
	if code != http.StatusOK {
		t.Fatalf("group charts: %d\n%s", code, body)
	}
	mustContain(t, "group charts", body, "No samples: the console runs without a sampler")
	code, refresh, body := b.getPage(t, "/topics/"+b.topic+"/charts")
	if code != http.StatusOK || refresh != "10" {
		t.Fatalf("topic charts: %d, Refresh %q (want 10)\n%s", code, refresh, body)
	}
	mustContain(t, "topic charts", body, "No job log: the console has no database")
	_, _, body = b.getPage(t, "/topics")
	mustContain(t, "topics", body, `href="/topics/`+b.topic+`/charts"`)
	if _, err := console.New(console.Client(b.cl), console.Charts(nil)); err == nil {
		t.Error("Charts(nil): no error")
	}
}

// The topic's chart counts its runs in the job log per outcome: done,
// failed (retried and discarded), parked; other topics' runs and runs
// older than the range are left out; names are escaped.
func TestTopicChartsCountTheJobLog(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	jl, err := pgjoblog.New(pool, pgjoblog.FlushEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- jl.Run(ctx) }()
	b := setup(t, console.Outbox(pool))
	topic := b.topic
	now := time.Now()
	runs := []struct {
		topic   string
		outcome worker.Outcome
		ago     time.Duration
	}{
		{topic, worker.OutcomeSucceeded, time.Minute}, {topic, worker.OutcomeSucceeded, time.Minute},
		{topic, worker.OutcomeSucceeded, 2 * time.Minute}, {topic, worker.OutcomeRetried, time.Minute},
		{topic, worker.OutcomeDiscarded, time.Minute}, {topic, worker.OutcomeParked, 3 * time.Minute},
		{topic, worker.OutcomeInterrupted, time.Minute}, {topic, worker.OutcomeSucceeded, 3 * time.Hour},
		{"other-topic", worker.OutcomeSucceeded, time.Minute},
	}
	// One run through the job log, which makes the day's partitions;
	// the others at the times the test needs.
	jl.JobFinished(&handler.Job{Topic: "warm-up", DeliveryCount: 1}, worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
	cancel() // Run writes what is left, then returns
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		ended := now.Add(-r.ago)
		if _, err := pool.Exec(t.Context(), `INSERT INTO shareq_job_runs (job_id, topic, partition, "offset", delivery_count, outcome, ack, started_at, ended_at, duration_us)
			VALUES ($1, $2, 0, $3, 1, $4, 'accept', $5, $5, 0)`, strconv.Itoa(i), r.topic, i, r.outcome.String(), ended); err != nil {
			t.Fatal(err)
		}
	}
	code, refresh, body := b.getPage(t, "/topics/"+topic+"/charts")
	if code != http.StatusOK || refresh != "10" {
		t.Fatalf("topic charts: %d, Refresh %q\n%s", code, refresh, body)
	}
	series := map[string]int{}
	for _, m := range regexp.MustCompile(`data-series="(\w+)" data-points="(\d+)"`).FindAllStringSubmatch(body, -1) {
		series[m[1]], _ = strconv.Atoi(m[2])
	}
	// Steps with runs: done at 1 and 2 minutes ago, failed at 1, parked at 3.
	if series["done"] != 2 || series["failed"] != 1 || series["parked"] != 1 || len(series) != 3 {
		t.Errorf("series points %v, want done 2, failed 1, parked 1\n%s", series, body)
	}
	// The largest step: 2 done and 2 failed a minute ago.
	mustContain(t, "topic charts", body, `data-ymax="4"`, "Runs of "+topic+" per minute, last hour")
	_, _, body = b.getPage(t, "/topics/"+topic+"/charts?range=24h")
	mustContain(t, "day", body, "per 10 minutes, last day")
	if m := regexp.MustCompile(`data-series="done" data-points="(\d+)"`).FindStringSubmatch(body); m == nil || m[1] < "2" {
		t.Errorf("day: done points %v, want 2 or 3 (the run 3 hours ago in a step of its own)", m)
	}
	_, _, body = b.getPage(t, "/topics/"+"a%3Cb%3E"+"/charts")
	mustContain(t, "escaped topic", body, "Runs of a&lt;b&gt; per minute", "No runs of this topic")
}
