package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// partitionsOf returns each topic's partition count, 0 for a missing one.
func partitionsOf(t *testing.T, adm *kadm.Client, topics ...string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, n := range topics {
		if d, ok := md[n]; ok && d.Err == nil {
			got[n] = len(d.Partitions)
		} else {
			got[n] = 0
		}
	}
	return got
}

// checkWorker runs a worker's start-up checks for topic, requiring its DLQ
// topic: what a webhook worker with the dlq middleware does.
func checkWorker(t *testing.T, brokers []string, topic string) error {
	t.Helper()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(worker.Brokers(brokers...), worker.Group(kafkatest.Name(t, "g")), worker.Handle(topic, nop),
		worker.RequireTopics(topic+".dlq"), worker.StartTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return w.Check(ctx)
}

// shareq topics create makes the topics and, with -dlq, their DLQ topics,
// in the brokers' metadata when it returns: a worker requiring the DLQ
// topic starts at once. Run again, it reports them as existing.
func TestTopicsCreate(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	brokers := strings.Join(c.Seeds, ",")
	a, b := kafkatest.Name(t, "webhooks"), kafkatest.Name(t, "emails")
	all := []string{a, b, a + ".dlq", b + ".dlq"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteTopics(ctx, all...)
	})

	if err := checkWorker(t, c.Seeds, a); !errors.Is(err, worker.ErrTopicMissing) {
		t.Fatalf("worker check before the topics exist: %v, want ErrTopicMissing", err)
	} else if !strings.Contains(err.Error(), "shareq topics create "+a+" -dlq -brokers "+brokers) ||
		!strings.Contains(err.Error(), "kafka-topics.sh --bootstrap-server "+brokers+" --create --topic "+a+" ") {
		t.Fatalf("missing-topic error does not say how to create it: %v", err)
	}

	out, errOut, err := cli(t, "topics", "create", a, "-partitions", "3", "-dlq", "-brokers", brokers, b)
	if err != nil {
		t.Fatalf("topics create: %v\n%s", err, errOut)
	}
	for _, want := range []string{"created  " + a + "  ", "created  " + a + ".dlq", "created  " + b + " ", "3 partitions", "1 partition\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	got := partitionsOf(t, c.Admin(), all...)
	for name, want := range map[string]int{a: 3, b: 3, a + ".dlq": 1, b + ".dlq": 1} {
		if got[name] != want {
			t.Errorf("%s has %d partitions, want %d", name, got[name], want)
		}
	}
	if err := checkWorker(t, c.Seeds, a); err != nil {
		t.Fatalf("worker check right after topics create: %v", err)
	}

	// Again: nothing changes, every topic is listed as existing with its
	// own partition count.
	out, errOut, err = cli(t, "topics", "create", "-brokers", brokers, "-partitions", "5", "-dlq", a)
	if err != nil {
		t.Fatalf("topics create again: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "exists  "+a+"  ") || !strings.Contains(out, "exists  "+a+".dlq") || strings.Contains(out, "created") || !strings.Contains(out, "3 partitions") {
		t.Errorf("second run output:\n%s", out)
	}
	if got := partitionsOf(t, c.Admin(), a); got[a] != 3 {
		t.Errorf("%s has %d partitions after the second run, want 3", a, got[a])
	}
}

func TestTopicsCreateErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"topics"}, true, "usage: shareq topics create"},
		{[]string{"topics", "list"}, true, `unknown subcommand "list"`},
		{[]string{"topics", "create"}, true, "name at least one topic"},
		{[]string{"topics", "create", "a b"}, false, `topic name "a b" has ' '`},
		{[]string{"topics", "create", ".."}, false, `topic name ".." is not allowed`},
		{[]string{"topics", "create", strings.Repeat("x", 250)}, false, "longer than Kafka's 249"},
		{[]string{"topics", "create", "-partitions", "0", "jobs"}, false, "-partitions 0: must be at least 1"},
		{[]string{"topics", "create", "-dlq-partitions", "0", "jobs"}, false, "-dlq-partitions 0"},
		{[]string{"topics", "create", "-replication-factor", "0", "jobs"}, false, "-replication-factor 0"},
		{[]string{"topics", "create", "-brokers", " ", "jobs"}, false, "no brokers given"},
	} {
		_, errOut, err := cli(t, tc.args...)
		switch {
		case err == nil:
			t.Errorf("%q: no error", tc.args)
		case tc.usage && (!errors.Is(err, errUsage) || !strings.Contains(errOut, tc.want)):
			t.Errorf("%q: %v, stderr %q; want usage with %q", tc.args, err, errOut, tc.want)
		case !tc.usage && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%q: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// -group-dlq creates the share group's dead-letter topic on the broker
// with the topic config that lets the group write to it; on Kafka 4.4+ a
// worker of that group then takes it up at start.
func TestTopicsCreateGroupDLQ(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	brokers := strings.Join(c.Seeds, ",")
	topic, group := c.Topic(t, 1), c.Group(t)
	name := worker.BrokerDLQTopic(group)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteTopics(ctx, name)
	})
	out, errOut, err := cli(t, "topics", "create", "-group-dlq", group, "-brokers", brokers)
	if c.Kind == "kafka" && !c.BrokerDLQ {
		// Kafka before 4.4 does not know the topic config.
		if err == nil || !strings.Contains(err.Error(), "need Apache Kafka 4.4+") {
			t.Fatalf("topics create -group-dlq on Kafka %s: %v, want an error saying it needs Kafka 4.4+", c.Version, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("topics create -group-dlq: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "created  "+name) {
		t.Fatalf("output lacks %s:\n%s", name, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcs, err := c.Admin().DescribeTopicConfigs(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	enabled := false
	for _, cfg := range rc.Configs {
		enabled = enabled || cfg.Key == groupcfg.TopicDLQGroupEnable && cfg.MaybeValue() == "true"
	}
	if !enabled {
		t.Fatalf("%s: configs %v, want %s=true", name, rc.Configs, groupcfg.TopicDLQGroupEnable)
	}
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Logger(slog.New(slog.DiscardHandler)),
		worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	want := name
	if !c.BrokerDLQ {
		want = "" // kfake, Kafka before 4.4: the topic is there, the broker does not use it
	}
	if got := w.BrokerDLQTopic(); got != want {
		t.Fatalf("%s %s: worker's broker DLQ %q, want %q", c.Kind, c.Version, got, want)
	}
}
