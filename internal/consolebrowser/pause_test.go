package consolebrowser_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
)

// TestPauseInBrowser: an operator signed in to the console pauses one
// topic of a group from the group page in Chromium, giving a reason; the
// page then lists the pause with the reason and who paused, the control
// topic holds it, and the Resume button ends it. Then a rate set for the
// topic is listed and cleared the same way. Each is one action line
// naming the user.
func TestPauseInBrowser(t *testing.T) {
	chromium := browser(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, group := topicAndGroup(t, c, shots, "newsletter", "mailers", 2)
	controls := kafkatest.Name(t, "controls")
	c.JoinWithoutFetching(t, group, 2, topic)
	cl := c.Client(t)
	logs := new(logbuf.Buffer)
	h, err := console.New(console.Client(cl), console.Actions(), console.BasicAuth("ops", "a long random password"),
		console.ControlTopic(controls), console.Logger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx := startBrowser(t, chromium, 1000, 760)
	do := tab{t, ctx}.do
	text := tab{t, ctx}.text
	signIn(t, ctx, "ops", "a long random password")

	do(chromedp.Navigate(srv.URL+"/groups/"+group), chromedp.WaitVisible(chromedp.ID("pause-form")))
	if got := text("#not-paused"); !strings.Contains(got, "Nothing paused") {
		t.Errorf("before the pause the page says %q", got)
	}
	do(chromedp.SetValue(chromedp.CSS(`#pause-form select[name=topic]`), topic),
		chromedp.SetValue(chromedp.CSS(`#pause-form input[name=reason]`), "ESP migration, ticket 812"),
		chromedp.Click(chromedp.CSS(`#pause-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("pauses")),
		screenshot(shots, "pause"))
	row := text("#pauses tbody tr")
	for _, want := range []string{topic, "ops via the console", "ESP migration, ticket 812"} {
		if !strings.Contains(row, want) {
			t.Errorf("the pause's row %q lacks %q", row, want)
		}
	}
	ctl, err := control.New(cl, control.Topic(controls))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ctl.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := st.Paused(group, topic); !ok || p.By != "ops via the console" {
		t.Errorf("the control topic holds %+v; want the pause by ops", st.Pauses)
	}

	do(chromedp.Click(chromedp.CSS(`#pauses button.resume`)), chromedp.WaitVisible(chromedp.ID("not-paused")))

	// A limit set at run time: a rate for the topic, key limits left to
	// the code; then back to the code's.
	do(chromedp.SetValue(chromedp.CSS(`#limit-form select[name=topic]`), topic),
		chromedp.SetValue(chromedp.CSS(`#limit-form input[name=rate]`), "14/s"),
		chromedp.SetValue(chromedp.CSS(`#limit-form input[name=reason]`), "SES quota, ticket 815"),
		chromedp.Click(chromedp.CSS(`#limit-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("limits")),
		screenshot(shots, "limits"))
	row = text("#limits tbody tr")
	for _, want := range []string{topic, "14/s", "code", "ops via the console", "SES quota, ticket 815"} {
		if !strings.Contains(row, want) {
			t.Errorf("the limit's row %q lacks %q", row, want)
		}
	}
	do(chromedp.Click(chromedp.CSS(`#limits button.clear-limit`)), chromedp.WaitVisible(chromedp.ID("no-limits")))
	for _, want := range []string{"who=ops action=pause outcome=done group=" + group + " topic=" + topic, "who=ops action=resume outcome=done",
		"who=ops action=limit outcome=done", "who=ops action=clear-limit outcome=done"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs.String(), `msg="console: action"`); n != 4 {
		t.Errorf("%d action lines; want 4:\n%s", n, logs)
	}
}
