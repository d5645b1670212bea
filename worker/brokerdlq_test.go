package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// createDLQTopic creates a topic share groups may use as their
// dead-letter topic (or, with enable false, one they may not).
func createDLQTopic(t *testing.T, c *kafkatest.Cluster, name string, enable bool) {
	t.Helper()
	configs := map[string]*string{}
	if enable {
		configs[groupcfg.TopicDLQGroupEnable] = kadm.StringPtr("true")
	}
	c.CreateTopicWith(t, name, 1, configs)
}

// checkWorker runs a worker's start-up checks with opts and returns it,
// Check's error and its log.
func checkWorker(t *testing.T, b *bundle, opts ...worker.Option) (*worker.Worker, error, string) {
	t.Helper()
	var logs logbuf.Buffer
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(append([]worker.Option{worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Check(context.Background())
	return w, err, logs.String()
}

// By default the worker takes up dlq.<group> when the brokers have
// share-group dead-letter topics and the topic is ready, says how to
// create it when it is not there (at Info level: it is optional), and
// says nothing on older brokers.
func TestBrokerDLQDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	topic := worker.BrokerDLQTopic(b.group)
	w, err, logs := checkWorker(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.BrokerDLQTopic(); got != "" {
		t.Fatalf("BrokerDLQTopic = %q before %s exists, want none", got, topic)
	}
	if !b.c.BrokerDLQ {
		if strings.Contains(logs, "dead-letter") {
			t.Fatalf("%s %s has no broker DLQ, yet the worker logged about it:\n%s", b.c.Kind, b.c.Version, logs)
		}
		return
	}
	requireOneDLQLine(t, logs, "INFO", "no dead-letter topic on the broker", "kafka-topics.sh", "--create --topic "+topic,
		groupcfg.TopicDLQGroupEnable+"=true", "shareq topics create -group-dlq "+b.group)

	createDLQTopic(t, b.c, topic, true)
	w, err, logs = checkWorker(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.BrokerDLQTopic(); got != topic {
		t.Fatalf("BrokerDLQTopic = %q, want %q\n%s", got, topic, logs)
	}
	wantGroupConfigs(t, b.c, b.group, map[string]string{groupcfg.DLQTopicName: topic, groupcfg.DLQCopyRecord: "true"})

	// An operator's choice on the group wins over the default name.
	b2 := &bundle{c: b.c, topic: b.topic, group: b.c.Group(t)}
	other := "dlq." + kafkatest.Name(t, "ops")
	createDLQTopic(t, b.c, other, true)
	b.c.SetGroupConfig(t, b2.group, map[string]string{groupcfg.DLQTopicName: other})
	if w, err, _ := checkWorker(t, b2); err != nil || w.BrokerDLQTopic() != other {
		t.Fatalf("group configured with %s: BrokerDLQTopic = %q (%v)", other, w.BrokerDLQTopic(), err)
	}

	catchesArchivedJobs(t, b, topic)
}

// requireOneDLQLine fails unless logs hold exactly one line about the
// dead-letter topic, at level, holding each of wants.
func requireOneDLQLine(t *testing.T, logs, level string, wants ...string) {
	t.Helper()
	var lines []string
	for l := range strings.Lines(logs) {
		if strings.Contains(l, "dead-letter") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level="+level+" ") {
		t.Fatalf("want one %s line about the dead-letter topic, got:\n%s", level, logs)
	}
	for _, want := range wants {
		if !strings.Contains(lines[0], want) {
			t.Fatalf("the dead-letter line lacks %q:\n%s", want, lines[0])
		}
	}
}

// Without BrokerDLQ, a dead-letter topic that was asked for and cannot
// take records is a warning: dlq.<group> created without its topic
// config, or the group's configured topic missing.
func TestBrokerDLQDefaultWarnsWhenAskedFor(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	createDLQTopic(t, b.c, worker.BrokerDLQTopic(b.group), false)
	w, err, logs := checkWorker(t, b)
	if err != nil || w.BrokerDLQTopic() != "" {
		t.Fatalf("dlq.<group> without %s: %v, topic %q", groupcfg.TopicDLQGroupEnable, err, w.BrokerDLQTopic())
	}
	if !b.c.BrokerDLQ { // older brokers, kfake: no such thing, nothing to say
		if strings.Contains(logs, "dead-letter") {
			t.Fatalf("%s %s has no broker DLQ, yet the worker logged about it:\n%s", b.c.Kind, b.c.Version, logs)
		}
		return
	}
	requireOneDLQLine(t, logs, "WARN", "cannot take records", "kafka-configs.sh", "--entity-name "+worker.BrokerDLQTopic(b.group),
		"--add-config "+groupcfg.TopicDLQGroupEnable+"=true")

	b2 := &bundle{c: b.c, topic: b.topic, group: b.c.Group(t)}
	missing := "dlq." + kafkatest.Name(t, "gone")
	b.c.SetGroupConfig(t, b2.group, map[string]string{groupcfg.DLQTopicName: missing})
	w, err, logs = checkWorker(t, b2)
	if err != nil || w.BrokerDLQTopic() != "" {
		t.Fatalf("group configured with the missing %s: %v, topic %q", missing, err, w.BrokerDLQTopic())
	}
	requireOneDLQLine(t, logs, "WARN", "the group's dead-letter topic cannot take records", "topic="+missing, "does not exist")
}

// BrokerDLQ(topic) requires the topic to be usable and says exactly what
// to create or set when it is not; on older brokers it says what version
// it needs. BrokerDLQ("") leaves the group alone.
func TestBrokerDLQExplicit(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	if !b.c.BrokerDLQ {
		_, err, _ := checkWorker(t, b, worker.BrokerDLQ("dlq.jobs"))
		if !errors.Is(err, worker.ErrBrokerDLQ) || !strings.Contains(err.Error(), "Apache Kafka 4.4") {
			t.Fatalf("BrokerDLQ on %s %s: %v, want ErrBrokerDLQ naming Kafka 4.4", b.c.Kind, b.c.Version, err)
		}
		if w, err, _ := checkWorker(t, b, worker.BrokerDLQ("")); err != nil || w.BrokerDLQTopic() != "" {
			t.Fatalf("BrokerDLQ(\"\"): %v, topic %q", err, w.BrokerDLQTopic())
		}
		return
	}
	missing := "dlq." + kafkatest.Name(t, "missing")
	off := "dlq." + kafkatest.Name(t, "off")
	createDLQTopic(t, b.c, off, false)
	unprefixed := kafkatest.Name(t, "noprefix")
	createDLQTopic(t, b.c, unprefixed, true)
	for _, tc := range []struct {
		topic string
		want  []string
	}{
		{missing, []string{"does not exist", "kafka-topics.sh --bootstrap-server " + b.c.Seeds[0] + " --create --topic " + missing + " --config " + groupcfg.TopicDLQGroupEnable + "=true"}},
		{off, []string{"kafka-configs.sh --bootstrap-server " + b.c.Seeds[0] + " --alter --entity-type topics --entity-name " + off + " --add-config " + groupcfg.TopicDLQGroupEnable + "=true"}},
		{unprefixed, []string{`starting with "dlq."`, groupcfg.BrokerDLQTopicPrefix}},
	} {
		w, err, _ := checkWorker(t, b, worker.BrokerDLQ(tc.topic))
		if !errors.Is(err, worker.ErrBrokerDLQ) {
			t.Fatalf("BrokerDLQ(%q): %v, want ErrBrokerDLQ", tc.topic, err)
		}
		for _, want := range tc.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("BrokerDLQ(%q): error %q lacks %q", tc.topic, err, want)
			}
		}
		if w.BrokerDLQTopic() != "" {
			t.Errorf("BrokerDLQ(%q) failed but BrokerDLQTopic = %q", tc.topic, w.BrokerDLQTopic())
		}
	}
	// Nothing was set on the group by the failed checks.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := groupcfg.Describe(ctx, b.c.Client(t), b.group, groupcfg.DLQTopicName)
	if err != nil || got[groupcfg.DLQTopicName] != "" {
		t.Fatalf("group %s = %v (%v), want unset", groupcfg.DLQTopicName, got, err)
	}
	if w, err, logs := checkWorker(t, b, worker.BrokerDLQ("")); err != nil || w.BrokerDLQTopic() != "" || strings.Contains(logs, "dead-letter") {
		t.Fatalf("BrokerDLQ(\"\"): %v, topic %q, logs:\n%s", err, w.BrokerDLQTopic(), logs)
	}
}

// catchesArchivedJobs: what the worker leaves to the broker lands in the
// group's dead-letter topic: a permanent failure with no dlq middleware
// (REJECT) and a job that fails on its last delivery (RELEASE); package
// dlq lists them and replays each as its source record, job ID and
// headers included.
func catchesArchivedJobs(t *testing.T, b *bundle, topic string) {
	t.Helper()
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		if string(job.Key) == "permanent" {
			return handler.Permanent(errors.New("cannot ever work"))
		}
		return errors.New("fails every time")
	})
	b.produce(t, "permanent", "retryable")
	stop := b.start(t, h, worker.DeliveryLimit(2), worker.RetryBackoff(func(int32) time.Duration { return 0 }))
	b.obs.WaitFor(t, 60*time.Second, "permanent rejected once, retryable released twice", func(es []finished) bool {
		return count(es, "permanent", worker.AckReject) == 1 && count(es, "retryable", worker.AckRelease) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cl := b.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ps []dlq.Parked
	for len(ps) < 2 { // the broker writes them as it archives them
		var err error
		if ps, err = dlq.List(ctx, cl, topic, dlq.Filter{}, 0); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s holds %d records, want 2", topic, len(ps))
		}
	}
	byKey := map[string]dlq.Parked{}
	for _, p := range ps {
		byKey[string(p.Key)] = p
	}
	if p := byKey["permanent"]; !p.Broker || p.Reason != dlq.ReasonBrokerRejected || p.DeliveryCount != 1 || p.SourceTopic != b.topic || p.Group != b.group {
		t.Errorf("permanent: %+v", p.Envelope)
	}
	if p := byKey["retryable"]; !p.Broker || p.Reason != handler.ReasonDeliveryLimit || p.DeliveryCount != 2 {
		t.Errorf("retryable: %+v", p.Envelope)
	}
	st, err := dlq.Replay(ctx, cl, topic, dlq.ReplayFilter(dlq.Filter{Reason: dlq.ReasonBrokerRejected}))
	if err != nil || st.Replayed != 1 || st.SourceGone != 0 {
		t.Fatalf("replay: %+v, %v", st, err)
	}
	recs := b.c.Consume(t, b.topic, 3)
	r, perm := recs[2], byKey["permanent"]
	from, _ := headerValue(r, dlq.HeaderReplayedFrom)
	id, _ := headerValue(r, handler.JobIDHeader)
	if string(r.Key) != "permanent" || from != perm.Location() || id != b.topic+"/0/0" {
		t.Fatalf("replayed record key %q from %q id %q, want permanent from %s with ID %s/0/0", r.Key, from, id, perm.Location(), b.topic)
	}
}

// headerValue returns the last value of header key on r.
func headerValue(r *kgo.Record, key string) (string, bool) {
	v, ok := "", false
	for _, h := range r.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}
