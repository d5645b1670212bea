package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
)

// shareq limit writes a topic's limits, replaced as a whole by the next;
// shareq limits lists them ("code" for what is left to the code); -clear
// removes them.
func TestLimitAndLimits(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	run := controlCLI(t, c, kafkatest.Name(t, "controls"))
	if out := run("limits"); !strings.Contains(out, "no limits set at run time") {
		t.Errorf("limits before any: %q", out)
	}
	out := run("limit", "hooks", "-topic", "webhooks", "-rate", "50/s", "-key-concurrency", "0", "-reason", "customer 42 asked", "-by", "ana")
	if !strings.Contains(out, "group hooks topic webhooks: rate 50/s, key concurrency 0, set by ana") {
		t.Errorf("limit printed %q", out)
	}
	out = run("limits", "-group", "hooks")
	for _, want := range []string{"RATE", "50/s", "none", "code", "customer 42 asked"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits lacks %q:\n%s", want, out)
		}
	}
	run("limit", "hooks", "-topic", "webhooks", "-key-rate", "2/s", "-reason", "slower")
	var ls []control.Limit
	if err := json.Unmarshal([]byte(run("limits", "-json")), &ls); err != nil || len(ls) != 1 {
		t.Fatalf("limits -json: %+v, %v", ls, err)
	}
	if l := ls[0]; l.Rate != nil || l.KeyConcurrency != nil || l.KeyRate == nil || *l.KeyRate != (control.Rate{N: 2, Per: time.Second}) {
		t.Errorf("the second limit did not replace the first as a whole: %+v", l)
	}
	if out := run("limit", "hooks", "-topic", "webhooks", "-clear"); !strings.Contains(out, "back to the limits its workers' code declares") {
		t.Errorf("limit -clear printed %q", out)
	}
	if out := run("limits"); !strings.Contains(out, "no limits set at run time") {
		t.Errorf("limits after -clear: %q", out)
	}
}

// Bad flags are refused before anything is written, each saying what to
// do.
func TestLimitBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"limit", "g", "-rate", "5/s", "-reason", "r"}, "-topic is required"},
		{[]string{"limit", "g", "-topic", "t", "-reason", "r"}, "give -rate, -key-concurrency or -key-rate"},
		{[]string{"limit", "g", "-topic", "t", "-rate", "5"}, "-rate: rate \"5\": want N/s"},
		{[]string{"limit", "g", "-topic", "t", "-rate", "5/s"}, "-reason is required"},
		{[]string{"limit", "g", "-topic", "t", "-key-concurrency", "-3", "-reason", "r"}, "-key-concurrency -3"},
		{[]string{"limit", "g", "-topic", "t", "-clear", "-rate", "5/s"}, "-clear goes back to the code's limits: drop [-rate]"},
	} {
		_, _, err := cli(t, append(tc.args, "-brokers", "127.0.0.1:1")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("shareq %s: %v; want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
