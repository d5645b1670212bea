package dlq

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
)

// findOne lists the jobs of topic that f selects and fails t unless there
// is exactly one.
func findOne(t *testing.T, cl *kgo.Client, topic string, f Filter) Parked {
	t.Helper()
	ps, err := List(context.Background(), cl, topic, f, 0)
	if err != nil || len(ps) != 1 {
		t.Fatalf("List %s: %d jobs (%v), want exactly one", f.String(), len(ps), err)
	}
	return ps[0]
}

// List and Replay find one job among many by its job ID, or by its
// source record's location.
func TestFilterByJobID(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	cl := c.Client(t, kgo.FetchMaxWait(100*time.Millisecond))
	topic := c.Topic(t, 1)
	dlqTopic := topic + TopicSuffix
	c.CreateTopic(t, dlqTopic, 2)
	parkN(t, cl, topic, "find", 0, 30, nil)
	ctx := context.Background()

	if p := findOne(t, cl, dlqTopic, Filter{JobID: "find-17"}); p.JobID() != "find-17" || string(p.Value) != "payload 17" {
		t.Errorf("by job ID: %s with job ID %q value %q, want find-17", p.Location(), p.JobID(), p.Value)
	}
	if p := findOne(t, cl, dlqTopic, Filter{JobID: topic + "/0/5"}); p.JobID() != "find-5" {
		t.Errorf("by source location %s/0/5: job ID %q, want find-5", topic, p.JobID())
	}
	for _, tc := range []struct {
		f    Filter
		want int
	}{
		{Filter{JobID: "find-1"}, 1}, // not find-17 nor find-1x
		{Filter{JobID: "FIND-17"}, 0},
		{Filter{JobID: "find-99"}, 0},
		{Filter{JobID: "find-17", Reason: handler.ReasonPanic}, 0},
	} {
		if ps, err := List(ctx, cl, dlqTopic, tc.f, 0); err != nil || len(ps) != tc.want {
			t.Errorf("List %s: %d jobs (%v), want %d", tc.f.String(), len(ps), err, tc.want)
		}
	}

	st, err := Replay(ctx, cl, dlqTopic, ReplayFilter(Filter{JobID: "find-17"}), ReplayLogger(quiet))
	if err != nil || st.Replayed != 1 || st.Filtered != 29 {
		t.Fatalf("replay of find-17: %+v, %v; want 1 replayed, 29 filtered out", st, err)
	}
	if p := findOne(t, cl, dlqTopic, Filter{JobID: "find-17"}); !p.Replayed() {
		t.Errorf("find-17 not shown replayed after its replay")
	}
}

// brokerDeadLetters returns a new source topic holding n jobs (job IDs
// "bid-i", keys "k-i", values "v-i") and a share group's dead-letter
// topic holding the broker's dead-letter records of them: written by the
// broker, for a share group that REJECTs every job, where it supports
// KIP-1191 (Kafka 4.4+); elsewhere (kfake, older Kafka) produced in the
// broker's format (see brokerRecord). The dead-letter topic also holds a
// record whose source record does not exist (offset n+5).
func brokerDeadLetters(t *testing.T, c *kafkatest.Cluster, n int) (src, dlqTopic string) {
	t.Helper()
	src = c.Topic(t, 1)
	dlqTopic = "dlq." + kafkatest.Name(t, "g")
	var configs map[string]*string
	if c.BrokerDLQ {
		configs = map[string]*string{groupcfg.TopicDLQGroupEnable: kadm.StringPtr("true")}
	}
	c.CreateTopicWith(t, dlqTopic, 1, configs)
	jobs := make([]*kgo.Record, n)
	for i := range jobs {
		jobs[i] = &kgo.Record{Topic: src, Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i),
			Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "bid-%d", i)}}}
	}
	c.Produce(t, jobs...)
	if c.BrokerDLQ {
		rejectAll(t, c, src, dlqTopic, n)
	} else {
		for i, j := range jobs {
			c.Produce(t, brokerRecordOf(dlqTopic, src, int64(i), j.Key, j.Value))
		}
	}
	c.Produce(t, brokerRecordOf(dlqTopic, src, int64(n+5), []byte("gone"), []byte("gone")))
	t.Logf("%s %s: dead-letter records written by %s", c.Kind, c.Version, map[bool]string{true: "the broker", false: "the test"}[c.BrokerDLQ])
	return src, dlqTopic
}

// brokerRecordOf is brokerRecord for source topic src.
func brokerRecordOf(dlqTopic, src string, srcOffset int64, key, value []byte) *kgo.Record {
	r := brokerRecord(dlqTopic, srcOffset, 1, BrokerMessageRejected, key, value)
	for i, h := range r.Headers {
		if h.Key == BrokerHeaderTopic {
			r.Headers[i].Value = []byte(src)
		}
	}
	return r
}

// rejectAll REJECTs the n records of src in a share group whose broker
// dead-letter topic is dlqTopic, and waits until the broker has written
// them all there.
func rejectAll(t *testing.T, c *kafkatest.Cluster, src, dlqTopic string, n int) {
	t.Helper()
	group := c.GroupWith(t, map[string]string{
		groupcfg.AutoOffsetReset: "earliest",
		groupcfg.DLQTopicName:    dlqTopic,
		groupcfg.DLQCopyRecord:   "true",
	})
	sc := c.ShareConsumer(t, group, []string{src})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for seen := 0; seen < n; {
		fs := sc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("share group %s: got %d of %d records to reject", group, seen, n)
		}
		for _, r := range fs.Records() {
			r.Ack(kgo.AckReject)
			seen++
		}
		if err := sc.FlushAcks(ctx); err != nil {
			t.Fatalf("reject: %v", err)
		}
	}
	for {
		ends, err := c.Admin().ListEndOffsets(ctx, dlqTopic)
		if o, ok := ends.Lookup(dlqTopic, 0); err == nil && ok && o.Offset >= int64(n) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker did not write %d dead-letter records to %s within 60s (%v)", n, dlqTopic, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The broker's dead-letter records carry no headers: List and Replay
// find one by the job ID of its source record, and, when that is gone,
// by its source location.
func TestFilterBrokerRecordsByJobID(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	cl := c.Client(t, kgo.FetchMaxWait(100*time.Millisecond))
	const n = 20
	src, dlqTopic := brokerDeadLetters(t, c, n)
	ctx := context.Background()

	p := findOne(t, cl, dlqTopic, Filter{JobID: "bid-13"})
	if !p.Broker || !p.Restored || p.JobID() != "bid-13" || string(p.Key) != "k-13" || p.SourceOffset != 13 {
		t.Errorf("by job ID: %s broker %v restored %v job ID %q key %q source offset %d; want bid-13 restored from %s/0/13",
			p.Location(), p.Broker, p.Restored, p.JobID(), p.Key, p.SourceOffset, src)
	}
	if p := findOne(t, cl, dlqTopic, Filter{JobID: src + "/0/4"}); p.JobID() != "bid-4" {
		t.Errorf("by source location %s/0/4: job ID %q, want bid-4", src, p.JobID())
	}
	gone := sourceID(src, 0, n+5)
	if p := findOne(t, cl, dlqTopic, Filter{JobID: gone}); p.JobIDKnown() || p.SourceOffset != n+5 {
		t.Errorf("by the location %s of a gone source record: job ID %q known %v", gone, p.JobID(), p.JobIDKnown())
	}
	if ps, err := List(ctx, cl, dlqTopic, Filter{JobID: "bid-13", Reason: handler.ReasonDeliveryLimit}, 0); err != nil || len(ps) != 0 {
		t.Errorf("bid-13 with reason %s: %d jobs (%v), want none (it was rejected)", handler.ReasonDeliveryLimit, len(ps), err)
	}
	ps, err := List(ctx, cl, dlqTopic, Filter{Reason: ReasonBrokerRejected}, 0)
	if err != nil || len(ps) != n+1 {
		t.Fatalf("List rejected: %d jobs (%v), want %d", len(ps), err, n+1)
	}

	var replayed []string
	st, err := Replay(ctx, cl, dlqTopic, ReplayFilter(Filter{JobID: "bid-7"}), ReplayLogger(quiet), ReplayOnRecord(func(p *Parked) {
		replayed = append(replayed, p.JobID())
	}))
	if err != nil || st.Replayed != 1 || st.Filtered != n || len(replayed) != 1 || replayed[0] != "bid-7" {
		t.Fatalf("replay of bid-7: %+v, %v, replayed %v; want bid-7 alone, %d filtered out", st, err, replayed, n)
	}
	recs := c.Consume(t, src, n+1)
	if id, _ := header(recs[n].Headers, handler.JobIDHeader); id != "bid-7" || string(recs[n].Value) != "v-7" {
		t.Errorf("replayed record: job ID %q value %q, want bid-7, v-7", id, recs[n].Value)
	}
	if p := findOne(t, cl, dlqTopic, Filter{JobID: "bid-7"}); !p.Replayed() {
		t.Errorf("bid-7 not shown replayed after its replay")
	}
}

// Filter.String names the job ID, so a replay by job ID has a progress
// group of its own.
func TestFilterJobIDString(t *testing.T) {
	t.Parallel()
	f := Filter{JobID: "a b"}
	if got := f.String(); got != "job-id="+strconv.Quote("a b") || !f.byEnvelope() {
		t.Errorf("String = %q, byEnvelope %v", got, f.byEnvelope())
	}
	if ReplayGroup("a.dlq", Filter{JobID: "a"}) == ReplayGroup("a.dlq", Filter{JobID: "b"}) {
		t.Errorf("replays of two job IDs share a progress group")
	}
}

// List matches broker records by job ID in batches of restoreBatch, and
// returns the matches in offset order among the envelope records that
// match directly.
func TestListByJobIDAcrossBatches(t *testing.T) {
	t.Parallel()
	_, cl := newCluster(t, 1, "jobs", "dlq.g")
	ctx := context.Background()
	n := 2*restoreBatch + 10
	var src, dead []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("bid-%d", i)
		if i == 1 || i == n-1 {
			id = "twice" // and parked by the middleware below
		}
		src = append(src, &kgo.Record{Topic: "jobs", Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i),
			Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(id)}}})
		dead = append(dead, brokerRecord("dlq.g", int64(i), 1, BrokerMessageRejected, src[i].Key, src[i].Value))
	}
	if err := cl.ProduceSync(ctx, src...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, dead...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// An envelope record in the same topic between them.
	env := Envelope{Reason: handler.ReasonPermanent, SourceTopic: "jobs", SourceOffset: 99999, ParkedAt: time.Now()}
	hs := append([]kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte("twice")}}, env.headers()...)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "dlq.g", Value: []byte("x"), Headers: hs}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, brokerRecord("dlq.g", int64(n+1), 1, BrokerMessageRejected, nil, nil)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	if p := findOne(t, cl, "dlq.g", Filter{JobID: fmt.Sprintf("bid-%d", n-3)}); p.Offset != int64(n-3) || !p.Restored {
		t.Errorf("bid-%d: found %s, restored %v", n-3, p.Location(), p.Restored)
	}
	ps, err := List(ctx, cl, "dlq.g", Filter{JobID: "twice"}, 0)
	var at []int64
	for _, p := range ps {
		at = append(at, p.Offset)
	}
	if err != nil || fmt.Sprint(at) != fmt.Sprint([]int64{1, int64(n - 1), int64(n)}) {
		t.Fatalf("List twice: offsets %v (%v), want 1, %d (broker records) and %d (the envelope), in order", at, err, n-1, n)
	}
	if ps, err := List(ctx, cl, "dlq.g", Filter{JobID: "twice"}, 2); err != nil || len(ps) != 2 || ps[1].Offset != int64(n-1) {
		t.Fatalf("List twice, limit 2: %d jobs (%v), want the first two", len(ps), err)
	}
}
