package kafkatest_test

// The broker's own dead-letter queue (KIP-1191, Apache Kafka 4.4+): with
// group config errors.deadletterqueue.topic.name set, the broker writes
// every record the group archives to that topic. These tests pin which
// records, with which headers, copied or not, and what happens when the
// topic cannot take them; on kfake and older Kafka they pin that the
// config does not exist. docs/architecture.md ("Kafka 4.4") and
// docs/compatibility.md describe the same.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
)

// dlqTopic creates a dead-letter topic for share groups: a name with the
// broker's default prefix and, when enable, the topic config that lets
// share groups write to it.
func dlqTopic(t *testing.T, c *kafkatest.Cluster, prefix string, enable bool) string {
	t.Helper()
	name := prefix + kafkatest.Name(t, "t")
	configs := map[string]*string{}
	if enable {
		configs[groupcfg.TopicDLQGroupEnable] = kadm.StringPtr("true")
	}
	c.CreateTopicWith(t, name, 1, configs)
	return name
}

// waitDone waits (bounded) until partition 0 of topic has nothing left
// for group: lag 0, and on brokers that report it exactly, the start
// offset at start. Apache Kafka's start offset trails by up to the last
// share-state write and moves only with the next one
// (StaleShareStartOffset), so it is not a condition to wait on there.
func waitDone(t *testing.T, c *kafkatest.Cluster, group, topic string, start int64) {
	t.Helper()
	want := fmt.Sprintf("lag 0 and start offset %d", start)
	waitOffsetsFunc(t, c, group, topic, want, func(got offsets) bool {
		o, ok := got[0]
		return ok && o[1] == 0 && (c.StaleShareStartOffset || o[0] == start)
	})
}

// headerMap returns a record's headers by name (the last one wins).
func headerMap(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// endOffset returns the high-water mark of partition 0 of topic.
func endOffset(t *testing.T, c *kafkatest.Cluster, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := c.Admin().ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %+v", topic, o)
	}
	return o.Offset
}

// hasBrokerDLQ reports whether c has the broker DLQ. Where it does not
// (kfake, Kafka before 4.4), it checks what a test there can: the group
// config does not exist, setting it fails with INVALID_CONFIG, so the
// broker dead-letters nothing.
func hasBrokerDLQ(t *testing.T, c *kafkatest.Cluster) bool {
	t.Helper()
	if c.BrokerDLQ {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := groupcfg.Set(ctx, c.Client(t), kafkatest.Name(t, "g"), map[string]string{groupcfg.DLQTopicName: "dlq.x"})
	if !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("%s %s (no broker DLQ): setting %s: %v, want INVALID_CONFIG", c.Kind, c.Version, groupcfg.DLQTopicName, err)
	}
	t.Logf("%s %s: no broker DLQ (%s is not a group config)", c.Kind, c.Version, groupcfg.DLQTopicName)
	return false
}

// A REJECTed record and one released on its last delivery are both
// written, each with the __dlq.errors.* headers and, with copy on, its
// key and value, but not its own headers; an accepted one is not. The
// write lands before the broker counts the record done.
func TestBrokerDLQRejectedAndExhausted(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	if !hasBrokerDLQ(t, c) {
		return
	}
	for _, copyRecord := range []bool{true, false} {
		t.Run("copy="+strconv.FormatBool(copyRecord), func(t *testing.T) {
			t.Parallel()
			topic, dlq := c.Topic(t, 1), dlqTopic(t, c, "dlq.", true)
			group := c.GroupWith(t, map[string]string{
				groupcfg.AutoOffsetReset:    "earliest",
				groupcfg.DeliveryCountLimit: "2",
				groupcfg.DLQTopicName:       dlq,
				groupcfg.DLQCopyRecord:      strconv.FormatBool(copyRecord),
			})
			jobHeader := kgo.RecordHeader{Key: "shareq-job-id", Value: []byte("id-1")}
			c.Produce(t,
				&kgo.Record{Topic: topic, Key: []byte("rejected"), Value: []byte("v-rejected"), Headers: []kgo.RecordHeader{jobHeader}},
				&kgo.Record{Topic: topic, Key: []byte("released"), Value: []byte("v-released")},
				&kgo.Record{Topic: topic, Key: []byte("accepted"), Value: []byte("v-accepted")})
			m := newMember(t, c, "m", group, topic, 3)
			recs := m.take(3, joinWait)
			recs[0].Ack(kgo.AckReject)
			recs[1].Ack(kgo.AckRelease)
			recs[2].Ack(kgo.AckAccept)
			m.ackOK()
			again := m.take(1, joinWait)
			if string(again[0].Key) != "released" || again[0].DeliveryCount() != 2 {
				t.Fatalf("got %v, want released on its last delivery (2)", keys(again))
			}
			again[0].Ack(kgo.AckRelease)
			m.ackOK()
			// Every record is done: rejected and released archived.
			waitDone(t, c, group, topic, 3)
			if n := endOffset(t, c, dlq); n != 2 {
				t.Fatalf("DLQ topic holds %d records once the group has archived both, want 2 (written before archiving)", n)
			}
			got := c.Consume(t, dlq, 2)
			want := []struct {
				key, value, offset, count, message string
			}{
				{"rejected", "v-rejected", "0", "1", "Offset rejected by client."},
				{"released", "v-released", "1", "2", "Offset delivery count exceeded the threshold."},
			}
			for i, r := range got {
				w := want[i]
				hs := headerMap(r)
				wantHs := map[string]string{
					"__dlq.errors.topic":          topic,
					"__dlq.errors.partition":      "0",
					"__dlq.errors.offset":         w.offset,
					"__dlq.errors.group":          group,
					"__dlq.errors.delivery.count": w.count,
					"__dlq.errors.message":        w.message,
				}
				for k, v := range wantHs {
					if hs[k] != v {
						t.Errorf("DLQ record %d: header %s = %q, want %q", i, k, hs[k], v)
					}
				}
				if len(hs) != len(wantHs) {
					t.Errorf("DLQ record %d: headers %v, want only the broker's %d (the job's own are not copied)", i, hs, len(wantHs))
				}
				if copyRecord && (string(r.Key) != w.key || string(r.Value) != w.value) {
					t.Errorf("DLQ record %d: key %q value %q, want the job's %q %q", i, r.Key, r.Value, w.key, w.value)
				}
				if !copyRecord && (len(r.Key) != 0 || len(r.Value) != 0) {
					t.Errorf("DLQ record %d without copy: key %q value %q, want none", i, r.Key, r.Value)
				}
			}
		})
	}
}

// A member killed during a record's last delivery: its connection closes,
// the broker ends the delivery and archives the record, and writes it to
// the dead-letter topic. This is the loss RELIABILITY.md issue 1 names,
// closed on 4.4 by the broker.
func TestBrokerDLQLastDeliveryCrash(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	if !hasBrokerDLQ(t, c) {
		return
	}
	topic, dlq := c.Topic(t, 1), dlqTopic(t, c, "dlq.", true)
	group := c.GroupWith(t, map[string]string{
		groupcfg.AutoOffsetReset:    "earliest",
		groupcfg.DeliveryCountLimit: "2",
		groupcfg.DLQTopicName:       dlq,
		groupcfg.DLQCopyRecord:      "true",
	})
	c.Produce(t, rec(topic, "poison"))
	m := newMember(t, c, "m", group, topic, 1)
	r := m.take(1, joinWait)[0]
	r.Ack(kgo.AckRelease)
	m.ackOK()
	m.cl.Close() // the crash member below must get the last delivery
	held, kill := kafkatest.StartCrashMember(t, c, group, topic, 1)
	if len(held) != 1 || held[0].Key != "poison" {
		t.Fatalf("crash member holds %v, want poison", held)
	}
	kill()
	got := c.Consume(t, dlq, 1)
	hs := headerMap(got[0])
	if string(got[0].Key) != "poison" || hs["__dlq.errors.delivery.count"] != "2" || hs["__dlq.errors.message"] != "Offset delivery count exceeded the threshold." {
		t.Fatalf("DLQ record key %q headers %v, want poison, delivery count 2, delivery limit message", got[0].Key, hs)
	}
}

// A dead-letter topic that is missing, lacks
// errors.deadletterqueue.group.enable=true, or has a name without the
// broker's prefix ("dlq."): the group config is accepted all the same,
// and the broker archives the record without writing it anywhere (its
// log says "Failed to write to DLQ, proceeding to ARCHIVED regardless"
// for the second). Only a name starting with "__" is refused.
func TestBrokerDLQUnusableTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	if !hasBrokerDLQ(t, c) {
		return
	}
	cases := []struct {
		name  string
		topic func(t *testing.T) (name string, exists bool)
	}{
		{"missing", func(t *testing.T) (string, bool) { return "dlq." + kafkatest.Name(t, "missing"), false }},
		{"not-enabled", func(t *testing.T) (string, bool) { return dlqTopic(t, c, "dlq.", false), true }},
		{"no-prefix", func(t *testing.T) (string, bool) { return dlqTopic(t, c, "x.", true), true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := c.Topic(t, 1)
			dlq, exists := tc.topic(t)
			group := c.GroupWith(t, map[string]string{
				groupcfg.AutoOffsetReset: "earliest",
				groupcfg.DLQTopicName:    dlq,
			})
			c.Produce(t, rec(topic, "rejected"))
			m := newMember(t, c, "m", group, topic, 1)
			m.take(1, joinWait)[0].Ack(kgo.AckReject)
			m.ackOK()
			waitDone(t, c, group, topic, 1)
			if before := drainToMarker(t, c, m, topic); len(before) != 0 {
				t.Fatalf("rejected record delivered again: %v", before)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			listed, err := c.Admin().ListTopics(ctx, dlq)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := listed[dlq]; exists != (ok && d.Err == nil) {
				t.Fatalf("DLQ topic %s: listed %v, want exists=%v (the broker must not create it)", dlq, listed, exists)
			}
			if exists {
				if n := endOffset(t, c, dlq); n != 0 {
					t.Fatalf("DLQ topic %s holds %d records, want 0", dlq, n)
				}
			}
		})
	}
	t.Run("reserved-name", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := groupcfg.Set(ctx, c.Client(t), kafkatest.Name(t, "g"), map[string]string{groupcfg.DLQTopicName: "__dlq"})
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("setting %s=__dlq: %v, want INVALID_CONFIG", groupcfg.DLQTopicName, err)
		}
	})
}

// The group configs' defaults on 4.4: no dead-letter topic, no copy.
func TestBrokerDLQDefaults(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	if !hasBrokerDLQ(t, c) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := groupcfg.Describe(ctx, c.Client(t), kafkatest.Name(t, "g"), groupcfg.DLQTopicName, groupcfg.DLQCopyRecord)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{groupcfg.DLQTopicName: "", groupcfg.DLQCopyRecord: "false"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	broker, err := groupcfg.Broker(ctx, c.Client(t), groupcfg.BrokerDLQTopicPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if p := broker[groupcfg.BrokerDLQTopicPrefix]; p != "dlq." {
		t.Errorf("broker %s = %q, want \"dlq.\"", groupcfg.BrokerDLQTopicPrefix, p)
	}
}
