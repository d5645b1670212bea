package consolebrowser_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
)

// screenshot saves the page's content, up to the viewport's height (no
// blank space under a short page), as name.png in dir; with dir "" it
// does nothing.
func screenshot(dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if dir == "" {
			return nil
		}
		size, err := chromedp.Evaluate[[2]float64](`[window.innerWidth, Math.min(Math.ceil(document.querySelector("main").getBoundingClientRect().bottom) + 8, window.innerHeight)]`)(ctx, tg)
		if err != nil {
			return err
		}
		res, err := cdp.Call(ctx, tg, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Clip: &page.Viewport{Width: size[0], Height: size[1], Scale: 1},
		})
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), res.Data, 0o644)
	})
}

// TestActionsWithAuthInBrowser: an operator whose browser holds the
// credentials of a console that needs basic auth enqueues a job through
// its form in Chromium, and the action's log line names the user. A
// console without auth, reached from another host (as the console sees
// it), shows no actions and refuses the enqueue form, saying what to do.
// A wrong password shows nothing of the console.
func TestActionsWithAuthInBrowser(t *testing.T) {
	chromium := browser(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, _ := topicAndGroup(t, c, shots, "emails", "", 1)
	cl := c.Client(t)
	const user, pass = "ops", "a long random password"
	logs := new(logbuf.Buffer)
	h, err := console.New(console.Client(cl), console.Actions(), console.BasicAuth(user, pass),
		console.Logger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	// The same console without auth, as a client on the network reaches
	// it: 192.0.2.7 stands for that client's address.
	open, err := console.New(console.Client(cl), console.Actions(), console.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.7:41000"
		open.ServeHTTP(w, r)
	}))
	defer remote.Close()

	ctx := startBrowser(t, chromium, 1000, 680)
	do := tab{t, ctx}.do
	text := tab{t, ctx}.text
	withUser := func(base, user, pass string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(user, pass)
		return u.String()
	}

	// Signed in (every request the page makes carries the credentials,
	// as once a browser has them for the console's realm), enqueue a job
	// through the form.
	signIn(t, ctx, user, pass)
	do(chromedp.Navigate(srv.URL+"/enqueue?topic="+topic), chromedp.WaitVisible(chromedp.CSS(`textarea[name=payload]`)),
		chromedp.SetValue(chromedp.CSS(`input[name=id]`), "welcome-42"),
		chromedp.SetValue(chromedp.CSS(`textarea[name=payload]`), `{"to":"ada@example.com","template":"welcome"}`),
		chromedp.Click(chromedp.CSS(`form.stack button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("enqueued")),
		screenshot(shots, "enqueue-auth"))
	if got := text("#enqueued"); !strings.Contains(got, "welcome-42") || !strings.Contains(got, topic) {
		t.Errorf("enqueue page says %q, want job welcome-42 to %s", got, topic)
	}
	want := `msg="console: action" who=ops action=enqueue outcome=done topic=` + topic + ` job_id=welcome-42`
	if lines := strings.Count(logs.String(), `msg="console: action"`); lines != 1 || !strings.Contains(logs.String(), want) {
		t.Errorf("log has %d action lines, want one with %q:\n%s", lines, want, logs)
	}
	if strings.Contains(logs.String(), pass) {
		t.Errorf("the password is in the log:\n%s", logs)
	}
	signIn(t, ctx, "", "")

	// Without auth, from the network: read-only, and the form refused.
	do(chromedp.Navigate(remote.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`header .badge`)))
	if badge := text("header .badge"); badge != "read-only" {
		t.Errorf("console without auth from the network: badge %q, want read-only", badge)
	}
	do(chromedp.Navigate(remote.URL+"/enqueue"), chromedp.WaitVisible(chromedp.CSS(`p.error`)), screenshot(shots, "actions-loopback-only"))
	if msg := text("p.error"); !strings.Contains(msg, "loopback clients only") || !strings.Contains(msg, "console.Authenticate or console.BasicAuth") {
		t.Errorf("enqueue form without auth from the network says %q", msg)
	}

	// A wrong password, typed into the address: the console answers 401
	// again, and Chromium, which has no one to ask for another, fails the
	// navigation; nothing of the console shows.
	if err := chromedp.Do(ctx, chromedp.Navigate(withUser(srv.URL, user, "wrong")+"/enqueue")); err == nil || !strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS") {
		t.Errorf("wrong password: navigation %v, want net::ERR_INVALID_AUTH_CREDENTIALS", err)
	}
}
