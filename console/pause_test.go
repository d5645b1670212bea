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
