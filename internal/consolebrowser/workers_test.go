package consolebrowser_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// TestWorkersInBrowser runs two workers of a group, one of them paused
// because its billing API is down, and an operator opens the console's
// Workers page in Chromium: both are listed with what they run and the
// dependency down; one stopped is gone on the next load.
func TestWorkersInBrowser(t *testing.T) {
	chromium := browser(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, group := topicAndGroup(t, c, shots, "invoices", "billing", 2)
	status := fleet.TopicDefault
	if !forDocs(c, shots) {
		status = kafkatest.Name(t, "workers")
	}
	c.CreateTopicWith(t, status, 1, fleet.TopicConfigs())

	start := func(name string, conc int, h handler.Handler) func() error {
		w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h), worker.Concurrency(conc),
			worker.StatusTopic(status), worker.StatusEvery(time.Second), worker.ClientOpts(kgo.ClientID(name)),
			worker.Logger(slog.New(slog.DiscardHandler)), worker.ShutdownTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return kafkatest.Run(t, w.Run)
	}
	start("invoicer-7f9c-1", 8, handler.Func(func(context.Context, *handler.Job) error {
		return handler.Unavailable("billing-api", errors.New("503 from billing"))
	}))
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte(`{"invoice":1}`)})
	cl := c.Client(t)
	waitRead(t, cl, status, group, func(ws []fleet.Status) bool { return len(ws) == 1 && len(ws[0].DependenciesDown) == 1 })
	stopB := start("invoicer-7f9c-2", 16, handler.Func(func(context.Context, *handler.Job) error { return nil }))
	waitRead(t, cl, status, group, func(ws []fleet.Status) bool { return len(ws) == 2 && ws[1].State == "joined" })

	h, err := console.New(console.Client(cl), console.WorkersTopic(status), console.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := startBrowser(t, chromium, 1200, 400)
	do := tab{t, ctx}.do
	rows := func() []string {
		t.Helper()
		rs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#workers tbody tr")].map(r => r.innerText)`))
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}

	do(chromedp.Navigate(srv.URL+"/"), chromedp.Click(chromedp.CSS(`nav a[href="/workers"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#workers`)), screenshot(shots, "workers"))
	rs := rows()
	if len(rs) != 2 || !strings.HasPrefix(rs[0], "invoicer-7f9c-1\t") || !strings.Contains(rs[0], "billing-api") ||
		!strings.Contains(rs[0], "\t"+group+"\t"+topic+"\tjoined\t8\t") || !strings.HasPrefix(rs[1], "invoicer-7f9c-2\t") || !strings.Contains(rs[1], "\t16\t") {
		t.Fatalf("workers page rows:\n%s", strings.Join(rs, "\n"))
	}

	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(srv.URL+"/workers"), chromedp.WaitVisible(chromedp.CSS(`#workers`)))
	if rs := rows(); len(rs) != 1 || !strings.HasPrefix(rs[0], "invoicer-7f9c-1\t") {
		t.Fatalf("after invoicer-7f9c-2 stopped, rows:\n%s", strings.Join(rs, "\n"))
	}
}

// waitRead waits until the group's workers read from topic satisfy ok.
func waitRead(t *testing.T, cl *kgo.Client, topic, group string, ok func([]fleet.Status) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ws, err := fleet.Read(context.Background(), cl, topic, time.Now())
		if ws = fleet.OfGroup(ws, group); err == nil && ok(ws) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers of %s in %s: %+v (%v)", group, topic, ws, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startBrowser starts chromium with a window of width × height and
// returns a context for its actions, bounded to 3 minutes; the browser
// stops when t ends.
func startBrowser(t *testing.T, chromium string, width, height int64) context.Context {
	t.Helper()
	actx, acancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(int(width), int(height)))...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	// The first action starts the browser, on a context without a
	// timeout (a timeout there would stop the browser with it).
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(width, height)); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
