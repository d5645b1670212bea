package consolebrowser_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// Environment variables of the test.
const (
	envBrowser     = "SHAREQ_TEST_BROWSER"
	envScreenshots = "SHAREQ_CONSOLE_SCREENSHOTS"
)

// browser returns the Chromium to run, or skips t when the browser test
// is not asked for (fails it under CI=true, which must run it).
func browser(t *testing.T) string {
	t.Helper()
	v := os.Getenv(envBrowser)
	switch v {
	case "":
		if os.Getenv("CI") == "true" {
			t.Fatal(envBrowser + " is not set; CI must run the browser test (scripts/test.sh sets it)")
		}
		t.Skip(envBrowser + " is not set; skipping the test in a real browser")
	case "1", "true":
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		t.Fatal(envBrowser + "=1 but no chromium on the PATH; as root run: apt-get install -y chromium")
	}
	return v
}

type image struct {
	URL  string `json:"url"`
	Fail string `json:"fail,omitempty"`
}

// TestReplayInBrowser runs a worker whose handler fails some jobs
// permanently (a bug) and some at decoding (bad payloads); both kinds are
// parked. Then the bug is fixed, and an operator opens the console in
// Chromium, filters the DLQ on reason permanent, replays every matching
// job, and sees them processed and the group's lag back to 0, while the
// decode failures stay parked.
func TestReplayInBrowser(t *testing.T) {
	chromium := browser(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, group := topicAndGroup(t, c, shots, "thumbnails", "thumbnailer", 2)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(t, dlqTopic, 1)
	cl := c.Client(t)

	const bad, undecodable, good = 6, 2, 4
	var recs []*kgo.Record
	for i := range bad + good {
		img := image{URL: fmt.Sprintf("https://img.example/%d.png", i)}
		if i < bad {
			img.Fail = "<script>alert('xss')</script> unsupported colour profile"
		}
		v, _ := json.Marshal(img)
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "user-%d", i), Value: v,
			Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "img-%d", i)}}})
	}
	for i := range undecodable {
		recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "not json %d", i)})
	}
	c.Produce(t, recs...)

	var fixed atomic.Bool
	var done atomic.Int64
	h := handler.JSON(func(_ context.Context, _ *handler.Job, img image) error {
		if img.Fail != "" && !fixed.Load() {
			return handler.Permanent(errors.New("thumbnail " + img.URL + ": " + img.Fail + "\n\tat thumbnail.go:42"))
		}
		done.Add(1)
		return nil
	})
	park, err := dlq.Middleware(cl, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	obs := new(shareqtest.Observer)
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h), worker.Use(park),
		worker.Observers(obs), worker.Logger(slog.New(slog.DiscardHandler)), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	defer stop()
	obs.WaitFor(t, 60*time.Second, "every job done or parked", func(es []shareqtest.Event) bool { return len(es) >= bad+good+undecodable })
	if n := done.Load(); n != good {
		t.Fatalf("%d jobs done before the fix, want %d", n, good)
	}
	fixed.Store(true)

	h2, err := console.New(console.Client(cl), console.Actions(), console.ReplayRate(50), console.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h2)
	defer srv.Close()

	ctx := startBrowser(t, chromium, 1000, 680)

	shot := func(name string) chromedp.Action[chromedp.Void] { return screenshot(shots, name) }
	count := func(css string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(css)+`).length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	text := tab{t, ctx}.text
	do := tab{t, ctx}.do
	const jobRows = "table.jobs tbody input[name=job]"

	do(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`a[href="/groups/`+group+`"]`)), shot("overview"))
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic), chromedp.WaitVisible(chromedp.CSS(`table.jobs`)), shot("dlq"))
	if n := count(jobRows); n != bad+undecodable {
		t.Fatalf("DLQ page lists %d jobs, want %d", n, bad+undecodable)
	}
	if n := count("script"); n != 0 {
		t.Errorf("the DLQ page has %d script elements, want none", n)
	}

	// Filter on the reason, as an operator types it.
	do(chromedp.SendKeys(chromedp.CSS(`input[name=reason]`), handler.ReasonPermanent),
		chromedp.Submit(chromedp.CSS(`input[name=reason]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=reason][value=`+handler.ReasonPermanent+`]`)),
		// A submit does not wait for the new page to load, as Navigate
		// does: the filter's input shows the new page has begun, its
		// pager (the last element) that all of it is in.
		chromedp.WaitVisible(chromedp.CSS(`p.pager`)),
		shot("dlq-filtered"))
	listText := text("table.jobs tbody")
	if n := count(jobRows); n != bad || strings.Contains(listText, handler.ReasonDecode) {
		t.Fatalf("filtered page: %d jobs, want %d, none decode:\n%s", n, bad, listText)
	}
	// The HTML in the error is text on the page, not markup.
	if !strings.Contains(listText, "<script>alert('xss')</script>") || count("script") != 0 {
		t.Errorf("filtered page does not show the error's HTML as text:\n%s", listText)
	}

	// Replay every job matching the filter.
	do(chromedp.Click(chromedp.ID("replay-matching")), chromedp.WaitVisible(chromedp.ID("replay-done")), shot("replay"))
	if done := text("#replay-done"); !strings.Contains(done, fmt.Sprintf("%d replayed", bad)) {
		t.Fatalf("replay page: %q, want %d replayed", done, bad)
	}
	if n := count("li.replayed-job"); n != bad {
		t.Errorf("replay page lists %d replayed jobs, want %d", n, bad)
	}
	obs.WaitFor(t, 60*time.Second, "the replayed jobs done", func([]shareqtest.Event) bool { return done.Load() == good+bad })

	// The group page shows the lag back to 0: reload until the broker
	// reports it (Apache Kafka's lag follows the acknowledgements once
	// it has written them to the share state).
	var lag string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		do(chromedp.Navigate(srv.URL + "/groups/" + group))
		if lag = text("#total-lag"); lag == "0" || time.Now().After(deadline) {
			break
		}
	}
	if lag != "0" {
		t.Fatalf("group page: total lag %q, want 0", lag)
	}
	do(shot("group"))

	// A second group on the topic whose member joined but never fetched:
	// no start offsets, so its page shows the lag as at least the records
	// waiting from the log start, never 0 (issue 29 item 4).
	idle := group + "-new"
	if shots == "" || c.Kind != "kfake" {
		idle = c.Group(t)
	} else {
		c.SetGroupConfig(t, idle, map[string]string{"share.auto.offset.reset": "earliest"})
	}
	c.JoinWithoutFetching(t, idle, 2, topic)
	ends, err := c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var inLog int64
	for _, ps := range ends {
		for _, o := range ps {
			inLog += o.Offset
		}
	}
	do(chromedp.Navigate(srv.URL+"/groups/"+idle), chromedp.WaitVisible(chromedp.ID("not-started")), shot("group-not-started"))
	if lag, want := text("#total-lag"), fmt.Sprintf("≥ %d", inLog); lag != want {
		t.Errorf("page of a group not started: total lag %q, want %q", lag, want)
	}
	if note := text("#not-started"); !strings.Contains(note, "2 of 2 partitions have no start offset yet") ||
		!strings.Contains(note, fmt.Sprintf("%d records in their logs, all waiting for the group (share.auto.offset.reset=earliest)", inLog)) {
		t.Errorf("page of a group not started says %q", note)
	}

	// The DLQ page shows the replayed jobs as replayed, and a second
	// replay of the same filter replays nothing.
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic+"?reason="+handler.ReasonPermanent), chromedp.WaitVisible(chromedp.ID("replay-matching")))
	if n := count("table.jobs tbody .replayed"); n != bad {
		t.Errorf("DLQ page after the replay: %d shown replayed, want %d", n, bad)
	}
	// The same replay again resumes from its saved progress: nothing new.
	do(chromedp.Click(chromedp.ID("replay-matching")), chromedp.WaitVisible(chromedp.ID("replay-done")))
	if again := text("#replay-done"); !strings.Contains(again, "0 replayed") || count("#replay-nothing") != 1 {
		t.Errorf("second replay: %q, want none replayed and nothing new read", again)
	}
	// Selected by hand, the replayed jobs are passed over: each job is
	// replayed at most once unless forced.
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic+"?reason="+handler.ReasonPermanent), chromedp.WaitVisible(chromedp.ID("replay-selected")))
	for i := range count(jobRows) {
		do(chromedp.Click(chromedp.CSS(fmt.Sprintf("table.jobs tbody tr:nth-child(%d) input[name=job]", i+1))))
	}
	do(chromedp.Click(chromedp.ID("replay-selected")), chromedp.WaitVisible(chromedp.ID("replay-done")))
	if sel := text("#replay-done"); !strings.Contains(sel, fmt.Sprintf("0 replayed of %d selected", bad)) || !strings.Contains(sel, fmt.Sprintf("%d passed over: replayed before", bad)) {
		t.Errorf("replay of the selected jobs: %q, want none replayed, %d passed over", sel, bad)
	}
	if n := done.Load(); n != good+bad {
		t.Errorf("%d jobs done after the second replays, want %d (each replayed once)", n, good+bad)
	}

	// One job found by its ID, as an operator pastes it from a log line.
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic), chromedp.WaitVisible(chromedp.CSS(`input[name=id]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=id]`), "img-3"),
		chromedp.Submit(chromedp.CSS(`input[name=id]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=id][value=img-3]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.pager`)))
	if n, ids := count(jobRows), text("table.jobs tbody code.id"); n != 1 || ids != "img-3" || count("table.jobs tbody .replayed") != 1 {
		t.Errorf("DLQ page filtered on job ID img-3: %d jobs (IDs %q), want img-3 alone, shown replayed", n, ids)
	}

	// One parked job, and the DLQ on a phone.
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic+"?reason="+handler.ReasonPermanent), chromedp.WaitVisible(chromedp.CSS("table.jobs")))
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("table.jobs tbody td a").getAttribute("href")`))
	if err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(srv.URL+href), chromedp.WaitVisible(chromedp.CSS("pre.error-text")), shot("job"))
	if e := text("pre.error-text"); !strings.Contains(e, "<script>alert('xss')</script>") || !strings.Contains(e, "thumbnail.go:42") {
		t.Errorf("job page error: %q", e)
	}
	do(chromedp.EmulateViewport(390, 720, chromedp.EmulateMobile),
		chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic), chromedp.WaitVisible(chromedp.CSS("table.jobs")), shot("dlq-phone"))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// signIn makes every request of the browser carry basic auth as user
// with pass, as once a browser has them for the console's realm; with
// user "" it stops.
func signIn(t *testing.T, ctx context.Context, user, pass string) {
	t.Helper()
	headers := network.Headers{}
	if user != "" {
		headers["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: headers})
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
}

// tab is a browser tab a test drives: an action that fails fails the
// test.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// do runs steps in the tab.
func (b tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// text returns the text of the first element css selects.
func (b tab) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}
