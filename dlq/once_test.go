package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
)

// onceBundle is a source topic and its DLQ topic (two partitions each) on
// kfake or a real broker (SHAREQ_TEST_BROKERS), with n jobs parked: job
// i, with job ID "once-i", is parked with reason "decode" when i%3 == 0,
// else "permanent".
type onceBundle struct {
	c          *kafkatest.Cluster
	cl         *kgo.Client
	topic, dlq string
	n          int
}

func setupOnce(t *testing.T, n int) *onceBundle {
	t.Helper()
	c := kafkatest.New(t)
	b := &onceBundle{c: c, cl: c.Client(t, kgo.FetchMaxWait(100*time.Millisecond)), n: n}
	b.topic = c.Topic(t, 2)
	b.dlq = b.topic + TopicSuffix
	c.CreateTopic(t, b.dlq, 2)
	mw, err := Middleware(b.cl, Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		reason := handler.ReasonPermanent
		if i%3 == 0 {
			reason = handler.ReasonDecode
		}
		job := &handler.Job{Topic: b.topic, Partition: int32(i % 2), Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i),
			Value: fmt.Appendf(nil, "payload %d", i), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "once-%d", i)}}}
		h := failWith(&handler.PermanentError{Reason: reason, Err: errors.New("nope")})
		if _, parked := handler.ParkedOf(handler.Chain(h, mw).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
	return b
}

// replayedIDs counts the records in the source topic by job ID, and
// returns where each job ID's records are.
func (b *onceBundle) replayedIDs(t *testing.T) (map[string]int, map[string][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(b.cl).ListEndOffsets(ctx, b.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ends.Each(func(o kadm.ListedOffset) { n += int(o.Offset) })
	counts, at := map[string]int{}, map[string][]string{}
	if n == 0 {
		return counts, at
	}
	for _, r := range b.c.Consume(t, b.topic, n) {
		id, _ := header(r.Headers, handler.JobIDHeader)
		counts[id]++
		at[id] = append(at[id], sourceID(r.Topic, r.Partition, r.Offset))
	}
	return counts, at
}

// A filtered replay then an unfiltered one replay each job once; List and
// Get say where each went; markers are never jobs.
func TestReplayOnceAcrossFilters(t *testing.T) {
	t.Parallel()
	b := setupOnce(t, 12)
	ctx := context.Background()
	logger, logs := testLogger()

	st, err := Replay(ctx, b.cl, b.dlq, ReplayFilter(Filter{Reason: handler.ReasonDecode}), ReplayLogger(logger))
	if err != nil || st.Replayed != 4 {
		t.Fatalf("filtered replay: %+v, %v; want the 4 decode jobs", st, err)
	}
	st, err = Replay(ctx, b.cl, b.dlq, ReplayLogger(logger))
	if err != nil || st.Replayed != 8 || st.AlreadyReplayed != 4 || st.Read != 12 {
		t.Fatalf("unfiltered replay: %+v, %v; want 8 replayed, 4 already replayed, 12 read (markers not counted)", st, err)
	}
	counts, at := b.replayedIDs(t)
	for i := range b.n {
		if id := fmt.Sprintf("once-%d", i); counts[id] != 1 {
			t.Errorf("job %s produced %d times, want 1", id, counts[id])
		}
	}
	if len(counts) != b.n {
		t.Errorf("source topic holds %d job IDs, want %d: %v", len(counts), b.n, counts)
	}
	if got := countLines(logs.String(), "dlq: replayed job"); got != 12 {
		t.Errorf("logged %d replayed jobs at Info, want 12:\n%s", got, logs)
	}
	if got := countLines(logs.String(), "dlq: replay done"); got != 2 {
		t.Errorf("logged %d replay summaries, want 2:\n%s", got, logs)
	}

	// A third run, of either filter, replays nothing.
	for _, f := range []Filter{{}, {Reason: handler.ReasonPermanent}, {Partitions: []int32{1}, Offsets: OffsetRange{From: 0, End: 3}}} {
		st, err := Replay(ctx, b.cl, b.dlq, ReplayFilter(f), ReplayLogger(quiet))
		if err != nil || st.Replayed != 0 {
			t.Fatalf("replay %s again: %+v, %v; want nothing replayed", f.String(), st, err)
		}
	}

	ps, err := List(ctx, b.cl, b.dlq, Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != b.n {
		t.Fatalf("List: %d entries, want the %d jobs and no markers", len(ps), b.n)
	}
	for i := range ps {
		p := &ps[i]
		m, ok := p.LastReplay()
		if p.Err != nil || len(p.Replays) != 1 || !ok {
			t.Fatalf("List %s: err %v, replays %+v; want one replay", p.Location(), p.Err, p.Replays)
		}
		if where := at[p.JobID()]; len(where) != 1 || where[0] != sourceID(m.Topic, m.Partition, m.Offset) || m.At.IsZero() || m.Marker <= p.Offset {
			t.Errorf("List %s: replay %+v, but job %s is at %v", p.Location(), m, p.JobID(), where)
		}
	}
	// A page that starts after some records still sees their markers.
	page, err := List(ctx, b.cl, b.dlq, Filter{Partitions: []int32{0}, Offsets: OffsetRange{From: 2}}, 2)
	if err != nil || len(page) != 2 || !page[0].Replayed() || !page[1].Replayed() {
		t.Fatalf("List page: %d entries, %v; want 2, replayed", len(page), err)
	}
	p, err := Get(ctx, b.cl, b.dlq, ps[0].Partition, ps[0].Offset)
	if err != nil || len(p.Replays) != 1 || p.Replays[0] != ps[0].Replays[0] {
		t.Fatalf("Get %s: replays %+v, %v; want List's %+v", ps[0].Location(), p.Replays, err, ps[0].Replays)
	}
	// A marker read raw is not a job.
	m := ps[0].Replays[0]
	if _, err := Get(ctx, b.cl, b.dlq, ps[0].Partition, m.Marker); !errors.Is(err, ErrMarker) {
		t.Fatalf("Get of the marker at %d: %v, want ErrMarker", m.Marker, err)
	}
}

// Force replays a job again, and its second replay is recorded too.
func TestReplayForce(t *testing.T) {
	t.Parallel()
	b := setupOnce(t, 4)
	ctx := context.Background()
	if st, err := Replay(ctx, b.cl, b.dlq, ReplayLogger(quiet)); err != nil || st.Replayed != 4 {
		t.Fatalf("replay: %+v, %v", st, err)
	}
	one := Filter{Partitions: []int32{0}, Offsets: OffsetRange{From: 0, End: 1}}
	if st, err := Replay(ctx, b.cl, b.dlq, ReplayFilter(one), ReplayLogger(quiet)); err != nil || st.Replayed != 0 || st.AlreadyReplayed != 1 {
		t.Fatalf("replay again without force: %+v, %v; want it passed over", st, err)
	}
	// Twice, with the same options: Force ignores the saved progress too.
	for run := range 2 {
		if st, err := Replay(ctx, b.cl, b.dlq, ReplayFilter(one), ReplayForce(), ReplayLogger(quiet)); err != nil || st.Replayed != 1 {
			t.Fatalf("forced replay %d: %+v, %v; want the job replayed", run, st, err)
		}
	}
	p, err := Get(ctx, b.cl, b.dlq, 0, 0)
	if err != nil || len(p.Replays) != 3 {
		t.Fatalf("Get: %d replays (%v), want 3", len(p.Replays), err)
	}
	counts, _ := b.replayedIDs(t)
	if counts[p.JobID()] != 3 {
		t.Errorf("job %s produced %d times, want 3 (once, then forced twice)", p.JobID(), counts[p.JobID()])
	}
	for id, n := range counts {
		if id != p.JobID() && n != 1 {
			t.Errorf("job %s produced %d times, want 1", id, n)
		}
	}
}

// failingMarks fails every marker after the first ok ones.
type failingMarks struct {
	ok   int32
	n    atomic.Int32
	next Producer
}

func (f *failingMarks) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if f.n.Add(1) > f.ok {
		out := make(kgo.ProduceResults, len(rs))
		for i, r := range rs {
			out[i] = kgo.ProduceResult{Record: r, Err: errors.New("crashed")}
		}
		return out
	}
	return f.next.ProduceSync(ctx, rs...)
}

// A replay interrupted between a job's produce and its marker replays
// that one job again on the next run, with the same job ID; nothing is
// lost.
func TestReplayInterruptedBeforeMarker(t *testing.T) {
	t.Parallel()
	b := setupOnce(t, 6)
	ctx := context.Background()
	manual := b.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(b.cl)
	rp := &replayer{read: b.cl, adm: adm, prod: b.cl, com: kadmCommitter{adm}, mark: &failingMarks{ok: 2, next: manual}}
	st, err := rp.run(ctx, replayConfigFor(t, b.dlq, ReplayLogger(quiet)))
	if err == nil || !strings.Contains(err.Error(), "could not write its replay marker") || !strings.Contains(err.Error(), "same job ID") {
		t.Fatalf("run error = %v, want a failed marker naming the job ID", err)
	}
	if st.Replayed != 3 {
		t.Fatalf("replayed %d, want 3 (two marked, the third produced without its marker)", st.Replayed)
	}
	// Another replay (here with another filter, so another progress
	// group) finds no marker for the third and replays it again.
	st, err = Replay(ctx, b.cl, b.dlq, ReplayFilter(Filter{Partitions: []int32{0, 1}}), ReplayLogger(quiet))
	if err != nil || st.Replayed != 4 || st.AlreadyReplayed != 2 {
		t.Fatalf("next run: %+v, %v; want 4 replayed (the unmarked one again, and the 3 not reached), 2 passed over", st, err)
	}
	counts, _ := b.replayedIDs(t)
	twice := 0
	for i := range b.n {
		switch n := counts[fmt.Sprintf("once-%d", i)]; n {
		case 1:
		case 2:
			twice++
		default:
			t.Errorf("job once-%d produced %d times", i, n)
		}
	}
	if twice != 1 {
		t.Errorf("%d jobs produced twice, want exactly the one interrupted before its marker", twice)
	}
}

// List on a topic that holds no DLQ records says so.
func TestListNotADLQTopic(t *testing.T) {
	t.Parallel()
	b := setupOnce(t, 0)
	b.c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte("a job")}, &kgo.Record{Topic: b.topic, Value: []byte("another")})
	_, err := List(context.Background(), b.cl, b.topic, Filter{}, 50)
	if !errors.Is(err, ErrNotDLQ) || !strings.Contains(err.Error(), b.topic+TopicSuffix) || !strings.Contains(err.Error(), "dlq.<group>") {
		t.Fatalf("List of the source topic: %v, want ErrNotDLQ naming %s and dlq.<group>", err, b.topic+TopicSuffix)
	}
	// An empty topic is an empty DLQ, not an error.
	if ps, err := List(context.Background(), b.cl, b.dlq, Filter{}, 50); err != nil || len(ps) != 0 {
		t.Fatalf("List of the empty DLQ topic: %d, %v", len(ps), err)
	}
}

// Parse calls a marker a marker, not a malformed job.
func TestParseMarker(t *testing.T) {
	t.Parallel()
	p := &Parked{Topic: "jobs.dlq", Partition: 1, Offset: 7}
	at := time.Date(2026, 12, 1, 16, 0, 0, 5, time.UTC)
	r := markerRecord(p, &kgo.Record{Topic: "jobs", Partition: 2, Offset: 40}, at)
	r.Offset = 9
	if _, err := Parse(r); !errors.Is(err, ErrMarker) || errors.Is(err, ErrMalformed) {
		t.Fatalf("Parse(marker) = %v, want ErrMarker", err)
	}
	of, m, err := ParseMarker(r)
	if err != nil || of != 7 || m != (ReplayMark{At: at, Topic: "jobs", Partition: 2, Offset: 40, Marker: 9}) {
		t.Fatalf("ParseMarker = %d, %+v, %v", of, m, err)
	}
	for name, hs := range map[string][]kgo.RecordHeader{
		"bad offset":       {{Key: HeaderReplayedOffset, Value: []byte("x")}},
		"marks itself":     {{Key: HeaderReplayedOffset, Value: []byte("9")}},
		"bad destination":  {{Key: HeaderReplayedOffset, Value: []byte("1")}, {Key: HeaderReplayedTo, Value: []byte("jobs/2")}},
		"bad time":         {{Key: HeaderReplayedOffset, Value: []byte("1")}, {Key: HeaderReplayedAt, Value: []byte("today")}},
		"not a marker":     {{Key: "other", Value: []byte("1")}},
		"negative offset":  {{Key: HeaderReplayedOffset, Value: []byte("-1")}},
		"partition not ok": {{Key: HeaderReplayedOffset, Value: []byte("1")}, {Key: HeaderReplayedTo, Value: []byte("jobs/x/3")}},
	} {
		if _, _, err := ParseMarker(&kgo.Record{Topic: "jobs.dlq", Offset: 9, Headers: hs}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseMarker = %v, want ErrMalformed", name, err)
		}
	}
}

// A share group's broker dead-letter topic (topic config
// errors.deadletterqueue.group.enable on Kafka 4.4+) takes replay markers
// like any DLQ topic: its records are replayed once too.
func TestReplayOnceBrokerDLQTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	cl := c.Client(t, kgo.FetchMaxWait(100*time.Millisecond))
	src := c.Topic(t, 1)
	topic := "dlq." + kafkatest.Name(t, "g")
	var configs map[string]*string
	if c.BrokerDLQ {
		configs = map[string]*string{groupcfg.TopicDLQGroupEnable: kadm.StringPtr("true")}
	}
	c.CreateTopicWith(t, topic, 1, configs)
	t.Logf("%s %s: %s with the broker's dead-letter topic config: %v", c.Kind, c.Version, topic, c.BrokerDLQ)
	c.Produce(t, &kgo.Record{Topic: src, Key: []byte("k0"), Value: []byte("v0"), Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte("id-0")}}})
	rec := brokerRecord(topic, 0, 1, BrokerMessageRejected, []byte("k0"), []byte("v0"))
	for i, h := range rec.Headers {
		if h.Key == BrokerHeaderTopic {
			rec.Headers[i].Value = []byte(src)
		}
	}
	c.Produce(t, rec)
	ctx := context.Background()
	for run, want := range []int{1, 0} {
		st, err := Replay(ctx, cl, topic, ReplayLogger(quiet))
		if err != nil || st.Replayed != want {
			t.Fatalf("replay %d: %+v, %v; want %d replayed", run, st, err, want)
		}
	}
	ps, err := List(ctx, cl, topic, Filter{}, 0)
	if err != nil || len(ps) != 1 || !ps[0].Replayed() || ps[0].JobID() != "id-0" {
		t.Fatalf("List: %+v, %v; want the one record, replayed, with its job ID", ps, err)
	}
	if m, _ := ps[0].LastReplay(); m.Topic != src || m.Offset != 1 {
		t.Fatalf("replayed to %+v, want %s offset 1", m, src)
	}
}
