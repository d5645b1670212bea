package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
)

// The group page shows the group's pauses; with actions it pauses a topic
// or the whole group (creating the control topic), by the sender, with
// the reason the form requires, and resumes it; each is one action line.
func TestPauseAction(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Name(t, "controls")
	b := setup(t, console.Actions(), console.ControlTopic(topic))
	logs := b.serveLogged(t, nil, console.Actions(), console.ControlTopic(topic))
	b.joinGroup(t)
	page := "/groups/" + b.group
	code, body := b.get(t, page)
	if code != http.StatusOK {
		t.Fatalf("group page: %d\n%s", code, body)
	}
	mustContain(t, "group page before a pause", body, `id="not-paused"`, `id="pause-form"`, `<option value="`+b.topic+`">`)

	code, body = b.post(t, page, page+"/pause", url.Values{"topic": {b.topic}, "reason": {"  "}})
	if code != http.StatusBadRequest || !strings.Contains(body, "a pause needs a reason") {
		t.Errorf("pause without a reason: %d\n%s", code, body)
	}
	code, body = b.post(t, page, page+"/pause", url.Values{"topic": {b.topic}, "reason": {"ESP migration <b>now</b>"}})
	if code != http.StatusOK {
		t.Fatalf("pause: %d\n%s", code, body)
	}
	mustContain(t, "group page after the pause", body, `<table id="pauses">`, "ESP migration &lt;b&gt;now&lt;/b&gt;",
		"anonymous (loopback) via the console", `class="resume"`)
	mustNotContain(t, "group page after the pause", body, `id="not-paused"`)

	ctl, err := control.New(b.cl, control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ctl.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := st.Paused(b.group, b.topic); !ok || p.Reason != "ESP migration <b>now</b>" {
		t.Fatalf("the control topic holds %+v; want the console's pause", st.Pauses)
	}

	code, body = b.post(t, page, page+"/resume", url.Values{"topic": {b.topic}})
	if code != http.StatusOK {
		t.Fatalf("resume: %d\n%s", code, body)
	}
	mustContain(t, "group page after the resume", body, `id="not-paused"`)
	for _, want := range []string{"action=pause outcome=failed", "action=pause outcome=done", "action=resume outcome=done", "reason=\"ESP migration <b>now</b>\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("action log lacks %q:\n%s", want, logs.String())
		}
	}
}

// A read-only console shows the pauses without the forms, and refuses a
// pause posted to it.
func TestPauseReadOnly(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Name(t, "controls")
	b := setup(t, console.ControlTopic(topic))
	b.joinGroup(t)
	ctl, err := control.New(b.cl, control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.EnsureTopic(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Pause(ctx, control.Pause{Group: b.group, Reason: "incident 42", By: "ana"}); err != nil {
		t.Fatal(err)
	}
	page := "/groups/" + b.group
	_, body := b.get(t, page)
	mustContain(t, "read-only group page", body, "<strong>every topic</strong>", "incident 42", "ana")
	mustNotContain(t, "read-only group page", body, `id="pause-form"`, `class="resume"`)
	code, body := b.post(t, "", page+"/pause", url.Values{"reason": {"x"}})
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("pause on a read-only console: %d\n%s", code, body)
	}
}

// With actions the group page sets a topic's limits at run time, empty
// fields left to the code, and takes them back to the code's; a form
// without a limit or a reason, or with a bad rate, is refused, saying
// what to give.
func TestLimitAction(t *testing.T) {
	t.Parallel()
	topic := kafkatest.Name(t, "controls")
	b := setup(t, console.Actions(), console.ControlTopic(topic))
	b.joinGroup(t)
	page := "/groups/" + b.group
	_, body := b.get(t, page)
	mustContain(t, "group page before a limit", body, `id="no-limits"`, `id="limit-form"`)
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"topic": {b.topic}, "reason": {"r"}}, "give a rate, a key concurrency or a key rate"},
		{url.Values{"topic": {b.topic}, "rate": {"14"}, "reason": {"r"}}, "want N/s"},
		{url.Values{"topic": {b.topic}, "key_concurrency": {"-1"}, "reason": {"r"}}, "want 0 (no limit)"},
		{url.Values{"topic": {b.topic}, "rate": {"14/s"}}, "a limit needs a reason"},
	} {
		if code, body := b.post(t, page, page+"/limit", tc.form); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("limit form %v: %d; want 400 saying %q\n%s", tc.form, code, tc.want, body)
		}
	}
	code, body := b.post(t, page, page+"/limit", url.Values{"topic": {b.topic}, "rate": {"14/s"}, "key_concurrency": {"0"}, "reason": {"SES quota"}})
	if code != http.StatusOK {
		t.Fatalf("limit: %d\n%s", code, body)
	}
	mustContain(t, "group page with a limit", body, `<table id="limits">`, "<td>14/s</td><td>none</td><td>code</td>", "SES quota", `class="clear-limit"`)
	ctl, err := control.New(b.cl, control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ctl.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := st.Limit(b.group, b.topic); !ok || l.Rate == nil || l.Rate.N != 14 || l.KeyRate != nil || l.By != "anonymous (loopback) via the console" {
		t.Fatalf("the control topic holds %+v; want the console's limit", st.Limits)
	}
	code, body = b.post(t, page, page+"/limit/clear", url.Values{"topic": {b.topic}})
	if code != http.StatusOK {
		t.Fatalf("clear: %d\n%s", code, body)
	}
	mustContain(t, "group page after the clear", body, `id="no-limits"`)
}
