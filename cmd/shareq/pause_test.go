package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/kafkatest"
)

// shareq pause creates the control topic (compacted) when it is missing
// and writes the pause; shareq pauses lists it as a table and as JSON;
// shareq resume ends it and says when a topic stays paused with its
// whole group; resuming what is not paused says so.
func TestPauseResumePauses(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "controls")
	run := controlCLI(t, c, topic)
	if out := run("pauses"); !strings.Contains(out, "nothing is paused") {
		t.Errorf("pauses before the control topic exists: %q", out)
	}
	if out := run("resume", "mailers"); !strings.Contains(out, "group mailers was not paused") {
		t.Errorf("resume before the control topic exists: %q", out)
	}
	out := run("pause", "mailers", "-topic", "newsletter", "-reason", "ESP migration", "-by", "ana")
	if !strings.Contains(out, "group mailers topic newsletter paused by ana") || !strings.Contains(out, "ESP migration") {
		t.Errorf("pause printed %q", out)
	}
	cfgs, err := kadm.NewClient(c.Client(t)).DescribeTopicConfigs(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cfgs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	compact := false
	for _, kv := range cfg.Configs {
		if kv.Key == "cleanup.policy" && kv.MaybeValue() == "compact" {
			compact = true
		}
	}
	if !compact {
		t.Errorf("the control topic pause created is not compacted: %+v", cfg.Configs)
	}
	run("pause", "mailers", "-reason", "incident 42", "-by", "bo")
	out = run("pauses", "-group", "mailers")
	for _, want := range []string{"GROUP", "mailers  *", "incident 42", "newsletter", "ana"} {
		if !strings.Contains(out, want) {
			t.Errorf("pauses lacks %q:\n%s", want, out)
		}
	}
	var ps []control.Pause
	if err := json.Unmarshal([]byte(run("pauses", "-json")), &ps); err != nil || len(ps) != 2 || !ps[0].Whole() {
		t.Fatalf("pauses -json: %+v, %v; want the whole group's pause, then newsletter's", ps, err)
	}
	out = run("resume", "mailers", "-topic", "newsletter")
	if !strings.Contains(out, "group mailers topic newsletter resumed") || !strings.Contains(out, "still paused with its whole group") {
		t.Errorf("resume of a topic whose group is paused printed %q", out)
	}
	if out := run("resume", "mailers", "-topic", "newsletter"); !strings.Contains(out, "was not paused") {
		t.Errorf("a second resume printed %q", out)
	}
	run("resume", "mailers")
	if out := run("pauses"); !strings.Contains(out, "nothing is paused") {
		t.Errorf("pauses after every resume: %q", out)
	}
}

// A pause without a reason is refused before anything is written, saying
// why a reason is needed.
func TestPauseNeedsAReason(t *testing.T) {
	t.Parallel()
	_, _, err := cli(t, "pause", "mailers", "-brokers", "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "-reason is required") {
		t.Fatalf("pause without -reason: %v", err)
	}
}

// topics create -controls makes the control topic; it lists as created,
// then as exists.
func TestTopicsCreateControls(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "controls")
	for _, want := range []string{"created", "exists"} {
		out, errOut, err := cli(t, "topics", "create", "-controls", "-controls-topic", topic, "-brokers", strings.Join(c.Seeds, ","))
		if err != nil {
			t.Fatalf("topics create -controls: %v\n%s", err, errOut)
		}
		if !strings.Contains(out, topic) || !strings.Contains(out, want) {
			t.Errorf("topics create -controls printed %q; want %s %s", out, topic, want)
		}
	}
}

// controlCLI returns a function that runs shareq with args on c and the
// control topic topic, failing t on an error, and returns its output.
func controlCLI(t *testing.T, c *kafkatest.Cluster, topic string) func(args ...string) string {
	brokers := strings.Join(c.Seeds, ",")
	return func(args ...string) string {
		t.Helper()
		out, errOut, err := cli(t, append(args, "-brokers", brokers, "-controls-topic", topic)...)
		if err != nil {
			t.Fatalf("shareq %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
}
