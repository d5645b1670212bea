package dlq

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// brokerRecord is a dead-letter record as Apache Kafka 4.4 writes it
// (pinned by internal/kafkatest's TestBrokerDLQRejectedAndExhausted):
// the broker's headers only, the job's key and value when copied.
func brokerRecord(topic string, srcOffset int64, count int, message string, key, value []byte) *kgo.Record {
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	return &kgo.Record{Topic: topic, Key: key, Value: value, Headers: []kgo.RecordHeader{
		h(BrokerHeaderTopic, "jobs"),
		h(BrokerHeaderPartition, "0"),
		h(BrokerHeaderOffset, strconv.FormatInt(srcOffset, 10)),
		h(BrokerHeaderGroup, "g"),
		h(BrokerHeaderDeliveryCount, strconv.Itoa(count)),
		h(BrokerHeaderMessage, message),
	}}
}

func TestParseBrokerRecord(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		message, reason string
	}{
		{BrokerMessageRejected, ReasonBrokerRejected},
		{BrokerMessageDeliveryLimit, handler.ReasonDeliveryLimit},
		{"Something new.", ReasonBroker},
	} {
		r := brokerRecord("dlq.g", 7, 3, tc.message, []byte("k"), []byte("v"))
		r.Timestamp, r.Offset = at, 4
		p, err := Parse(r)
		if err != nil {
			t.Fatalf("%q: %v", tc.message, err)
		}
		want := Envelope{Broker: true, Reason: tc.reason, Error: tc.message, DeliveryCount: 3,
			SourceTopic: "jobs", SourcePartition: 0, SourceOffset: 7, Group: "g", ParkedAt: at}
		if p.Envelope != want {
			t.Errorf("%q: envelope %+v, want %+v", tc.message, p.Envelope, want)
		}
		if string(p.Key) != "k" || string(p.Value) != "v" || p.Headers != nil || p.Location() != "dlq.g/0/4" {
			t.Errorf("%q: key %q value %q headers %v location %s", tc.message, p.Key, p.Value, p.Headers, p.Location())
		}
		if p.JobID() != "jobs/0/7" {
			t.Errorf("JobID = %q, want the source location until restored", p.JobID())
		}
	}

	bad := brokerRecord("dlq.g", 7, 3, BrokerMessageRejected, nil, nil)
	bad.Headers = bad.Headers[1:] // no topic
	if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("broker record without %s: %v, want ErrMalformed", BrokerHeaderTopic, err)
	}
	bad = brokerRecord("dlq.g", 7, 3, BrokerMessageRejected, nil, nil)
	bad.Headers[2].Value = []byte("x")
	if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("broker record with offset %q: %v, want ErrMalformed", "x", err)
	}
	// A record with the middleware's envelope is the middleware's, even
	// if it carries broker headers too (a broker record replayed, parked
	// again).
	mixed := brokerRecord("jobs.dlq", 7, 3, BrokerMessageRejected, nil, nil)
	mixed.Headers = append(mixed.Headers, (&Envelope{Reason: "permanent", SourceTopic: "jobs", SourceOffset: 9}).headers()...)
	p, err := Parse(mixed)
	if err != nil || p.Broker || p.SourceOffset != 9 {
		t.Errorf("mixed record: %+v, %v; want the middleware's envelope", p.Envelope, err)
	}
}

// brokerBundle is a kfake cluster with a source topic "jobs" holding two
// jobs and a share group's dead-letter topic "dlq.g" holding broker
// records of them.
func brokerBundle(t *testing.T) *replayBundle {
	t.Helper()
	c, cl := newCluster(t, 1, "jobs", "dlq.g")
	ctx := context.Background()
	src := []*kgo.Record{
		{Topic: "jobs", Key: []byte("k0"), Value: []byte("v0"), Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte("id-0")}, {Key: "trace", Value: []byte("t0")}}},
		{Topic: "jobs", Key: []byte("k1"), Value: []byte("v1")},
	}
	if err := cl.ProduceSync(ctx, src...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dlqs := []*kgo.Record{
		brokerRecord("dlq.g", 0, 1, BrokerMessageRejected, []byte("k0"), []byte("v0")),         // copied
		brokerRecord("dlq.g", 1, 5, BrokerMessageDeliveryLimit, nil, nil),                      // not copied
		brokerRecord("dlq.g", 9, 5, BrokerMessageDeliveryLimit, []byte("k9"), []byte("v9")),    // source gone
		brokerRecord("dlq.g", 1, 5, BrokerMessageDeliveryLimit, []byte("other"), []byte("v1")), // not that record
	}
	if err := cl.ProduceSync(ctx, dlqs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return &replayBundle{c: c, cl: cl}
}

func TestGetRestoresBrokerRecord(t *testing.T) {
	b := brokerBundle(t)
	ctx := context.Background()
	for _, tc := range []struct {
		offset   int64
		restored bool
		id       string
	}{{0, true, "id-0"}, {1, true, "jobs/0/1"}, {2, false, "jobs/0/9"}, {3, false, "jobs/0/1"}} {
		p, err := Get(ctx, b.cl, "dlq.g", 0, tc.offset)
		if err != nil {
			t.Fatalf("Get %d: %v", tc.offset, err)
		}
		if !p.Broker || p.Restored != tc.restored || p.JobID() != tc.id {
			t.Errorf("Get %d: broker %v restored %v job ID %q, want restored %v, %q", tc.offset, p.Broker, p.Restored, p.JobID(), tc.restored, tc.id)
		}
		if tc.offset == 0 {
			if v, _ := header(p.Headers, "trace"); v != "t0" || string(p.Value) != "v0" || p.EnqueuedAt.IsZero() {
				t.Errorf("Get 0: headers %v value %q enqueued %v, want the source record's", p.Headers, p.Value, p.EnqueuedAt)
			}
		}
		if tc.offset == 1 && string(p.Key) != "k1" {
			t.Errorf("Get 1: key %q, want the source record's k1", p.Key)
		}
	}
	// List restores them too, and says which job IDs it does not know.
	ps, err := List(ctx, b.cl, "dlq.g", Filter{}, 0)
	if err != nil || len(ps) != 4 {
		t.Fatalf("List: %d records (%v), want 4", len(ps), err)
	}
	for i, tc := range []struct {
		restored bool
		id       string
	}{{true, "id-0"}, {true, "jobs/0/1"}, {false, "jobs/0/9"}, {false, "jobs/0/1"}} {
		if p := &ps[i]; p.Restored != tc.restored || p.JobIDKnown() != tc.restored || p.JobID() != tc.id {
			t.Errorf("List %d: restored %v, job ID %q known %v; want restored %v, %q", i, p.Restored, p.JobID(), p.JobIDKnown(), tc.restored, tc.id)
		}
	}
}

// Replay re-produces a broker record as its source record (headers and
// job ID included) and passes over the ones whose source is gone.
func TestReplayBrokerRecords(t *testing.T) {
	b := brokerBundle(t)
	ctx := context.Background()
	logger, logs := testLogger()
	st, err := Replay(ctx, b.cl, "dlq.g", ReplayLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	if st.Read != 4 || st.Replayed != 2 || st.SourceGone != 2 {
		t.Fatalf("stats %+v, want 4 read, 2 replayed, 2 source gone", st)
	}
	recs := consumeAll(t, b.c, "jobs")
	if len(recs) != 4 {
		t.Fatalf("jobs holds %d records, want 2 + 2 replayed", len(recs))
	}
	for i, r := range recs[2:] {
		id, _ := header(r.Headers, handler.JobIDHeader)
		from, _ := header(r.Headers, HeaderReplayedFrom)
		wantID := []string{"id-0", "jobs/0/1"}[i]
		if id != wantID || from != "dlq.g/0/"+strconv.Itoa(i) || string(r.Key) != "k"+strconv.Itoa(i) || string(r.Value) != "v"+strconv.Itoa(i) {
			t.Errorf("replayed %d: key %q value %q id %q from %q", i, r.Key, r.Value, id, from)
		}
		if i == 0 {
			if v, _ := header(r.Headers, "trace"); v != "t0" {
				t.Errorf("replayed 0 lost its own header: %v", r.Headers)
			}
		}
	}
	if n := countLines(logs.String(), "its source record"); n != 2 {
		t.Errorf("logged %d source-gone errors, want 2:\n%s", n, logs)
	}
}

// countLines counts the lines of s that contain sub.
func countLines(s, sub string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}
