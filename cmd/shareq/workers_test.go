package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// workersOf returns shareq workers -json for group, failing the test on
// an error.
func workersOf(t *testing.T, brokers, topic, group string) []fleet.Status {
	t.Helper()
	out, errOut, err := cli(t, "workers", "-json", "-brokers", brokers, "-topic", topic, "-group", group)
	if err != nil {
		t.Fatalf("workers: %v\n%s", err, errOut)
	}
	var ws []fleet.Status
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("workers -json is not a list of statuses: %v\n%s", err, out)
	}
	return ws
}

// shareq topics create -workers makes the status topic, compacted; shareq
// workers lists the workers publishing to it, as a table and as JSON,
// and no longer lists one that stopped.
func TestWorkersListsRunningWorkers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	brokers := strings.Join(c.Seeds, ",")
	status := kafkatest.Name(t, "workers")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteTopics(ctx, status)
	})
	out, errOut, err := cli(t, "topics", "create", "-workers", "-workers-topic", status, "-brokers", brokers)
	if err != nil || !strings.Contains(out, "created  "+status+"  1 partition") {
		t.Fatalf("topics create -workers: %v\n%s%s", err, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcs, err := c.Admin().DescribeTopicConfigs(ctx, status)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rcs.On(status, nil); err != nil || !slices.ContainsFunc(v.Configs, func(c kadm.Config) bool {
		return c.Key == "cleanup.policy" && c.Value != nil && *c.Value == "compact,delete"
	}) {
		t.Fatalf("status topic configs %+v (%v), want cleanup.policy=compact,delete", v.Configs, err)
	}

	topic, group := c.Topic(t, 1), c.Group(t)
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	start := func(name string) func() error {
		w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
			worker.StatusTopic(status), worker.ClientOpts(kgo.ClientID(name)), worker.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			t.Fatal(err)
		}
		return kafkatest.Run(t, w.Run)
	}
	stopA := start("worker-a")
	start("worker-b")
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws := workersOf(t, brokers, status, group)
		if len(ws) == 2 && ws[0].State == "joined" && ws[1].State == "joined" {
			if ws[0].Name != "worker-a" || ws[1].Name != "worker-b" || !slices.Equal(ws[0].Topics, []string{topic}) {
				t.Fatalf("workers %+v, want worker-a and worker-b handling %s", ws, topic)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers %+v, want worker-a and worker-b joined", ws)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, errOut, err = cli(t, "workers", "-brokers", brokers, "-topic", status, "-group", group)
	if err != nil {
		t.Fatalf("workers: %v\n%s", err, errOut)
	}
	t.Logf("shareq workers:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") || !strings.Contains(lines[0], "DOWN") ||
		!strings.HasPrefix(lines[1], "worker-a ") || !strings.HasPrefix(lines[2], "worker-b ") ||
		!strings.Contains(lines[1], " "+group+" ") || !strings.Contains(lines[1], " "+topic+" ") || !strings.Contains(lines[1], " joined ") {
		t.Fatalf("workers table:\n%s", out)
	}

	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	if ws := workersOf(t, brokers, status, group); len(ws) != 1 || ws[0].Name != "worker-b" {
		t.Fatalf("after worker-a stopped: %+v, want worker-b only", ws)
	}
}

// shareq workers on a cluster without the status topic says how to
// create it.
func TestWorkersWithoutTopicSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	_, _, err := cli(t, "workers", "-brokers", strings.Join(c.Seeds, ","), "-topic", kafkatest.Name(t, "none"))
	if !errors.Is(err, fleet.ErrNoTopic) || !strings.Contains(err.Error(), "shareq topics create -workers") {
		t.Fatalf("workers without the topic: %v, want ErrNoTopic saying how to create it", err)
	}
}

// The PAUSED column names each topic an operator paused with who did.
func TestPrintWorkersShowsPausedTopics(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var out strings.Builder
	ws := []fleet.Status{
		{Name: "w1", Group: "g", Topics: []string{"a", "b"}, State: "joined", LastSeen: now,
			Paused: []fleet.PausedTopic{{Topic: "a", Reason: "migration", By: "ops", Since: now}}},
		{Name: "w2", Group: "g", Topics: []string{"a", "b"}, State: "joined", LastSeen: now},
	}
	if err := printWorkers(&out, ws, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], " PAUSED ") || !strings.Contains(lines[1], " a (ops) ") || !strings.Contains(lines[2], " - ") {
		t.Fatalf("workers table:\n%s", out.String())
	}
}
