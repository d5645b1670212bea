package dlq

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/logbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeProducer records what it is asked to produce and answers with err,
// or with offsets counting from 0.
type fakeProducer struct {
	mu        sync.Mutex
	err       error
	records   []*kgo.Record
	ctxErrs   []error     // ctx.Err() at each call
	deadlines []time.Time // ctx's deadline at each call
}

func (f *fakeProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(kgo.ProduceResults, 0, len(rs))
	for _, r := range rs {
		dl, _ := ctx.Deadline()
		f.ctxErrs, f.deadlines = append(f.ctxErrs, ctx.Err()), append(f.deadlines, dl)
		if f.err != nil {
			out = append(out, kgo.ProduceResult{Record: r, Err: f.err})
			continue
		}
		r.Offset = int64(len(f.records))
		f.records = append(f.records, r)
		out = append(out, kgo.ProduceResult{Record: r})
	}
	return out
}

func (f *fakeProducer) produced() []*kgo.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*kgo.Record(nil), f.records...)
}

func testLogger() (*slog.Logger, *logbuf.Buffer) {
	var buf logbuf.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

// newCluster starts a one-broker kfake cluster with topics of the given
// partition count, and a plain client for it. Both close at cleanup.
func newCluster(t *testing.T, partitions int32, topics ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, newClient(t, c)
}

func newClient(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// consumeAll returns every record in topic, read with a fresh client up
// to the high-water marks at the call.
func consumeAll(t *testing.T, c *kfake.Cluster, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(newClient(t, c)).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	ends.Each(func(o kadm.ListedOffset) { want += int(o.Offset) }) // no retention in these tests: starts are 0
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*kgo.Record
	for len(out) < want {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s: got %d of %d records: %v", topic, len(out), want, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func header(hs []kgo.RecordHeader, key string) (string, bool) {
	v, ok := "", false
	for _, h := range hs {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

func countHeader(hs []kgo.RecordHeader, key string) int {
	n := 0
	for _, h := range hs {
		if h.Key == key {
			n++
		}
	}
	return n
}

// testJob returns a job of topic "jobs" on its delivery'th delivery of a
// limit of 5.
func testJob(offset int64, delivery int32, hs ...handler.Header) *handler.Job {
	return &handler.Job{
		Topic:         "jobs",
		Partition:     1,
		Offset:        offset,
		Key:           []byte("key"),
		Value:         []byte(`{"n":1}`),
		Headers:       hs,
		Timestamp:     time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC),
		Group:         "workers",
		DeliveryCount: delivery,
		DeliveryLimit: 5,
	}
}

func failWith(err error) handler.Handler {
	return handler.Func(func(context.Context, *handler.Job) error { return err })
}
