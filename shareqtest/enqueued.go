package shareqtest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// Source is where [RequireEnqueued] looks for the jobs a piece of code
// enqueued: a [Recorder] that the code produced through, or a [Queue]
// whose in-process broker it produced to.
type Source interface {
	// EnqueuedRecords returns the records written to topic, in the order
	// they were written (per partition, for a broker).
	EnqueuedRecords(t testing.TB, topic string) []*kgo.Record
}

// Recorder is an [enqueue.Producer] that records what it is asked to
// produce and acknowledges every record at once, without a broker. Pass
// it to enqueue.New in the code under test and assert with
// [RequireEnqueued]. The zero Recorder is ready to use; it is safe for
// concurrent use.
type Recorder struct {
	mu      sync.Mutex
	recs    []*kgo.Record
	offsets map[string]int64
}

var (
	_ enqueue.Producer = (*Recorder)(nil)
	_ Source           = (*Recorder)(nil)
	_ Source           = (*Queue)(nil)
)

// ProduceSync records rs, giving each the next offset of partition 0 of
// its topic, and acknowledges them.
func (r *Recorder) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.offsets == nil {
		r.offsets = map[string]int64{}
	}
	res := make(kgo.ProduceResults, 0, len(rs))
	for _, rec := range rs {
		rec.Partition, rec.Offset = 0, r.offsets[rec.Topic]
		r.offsets[rec.Topic]++
		if rec.Timestamp.IsZero() {
			rec.Timestamp = time.Now()
		}
		r.recs = append(r.recs, rec)
		res = append(res, kgo.ProduceResult{Record: rec})
	}
	return res
}

// EnqueuedRecords returns the records recorded for topic.
func (r *Recorder) EnqueuedRecords(_ testing.TB, topic string) []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*kgo.Record
	for _, rec := range r.recs {
		if rec.Topic == topic {
			out = append(out, rec)
		}
	}
	return out
}

// EnqueuedRecords reads every record of topic from the Queue's broker,
// from the start of each partition to its end at the time of the call.
func (q *Queue) EnqueuedRecords(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), produceTimeout)
	defer cancel()
	ends, err := kadm.NewClient(q.client).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("shareqtest: end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
			n += o.Offset
		}
	})
	if n == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(q.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("shareqtest: %v", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("shareqtest: read %d of the %d records of %s before the timeout", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Partition] {
				out = append(out, r)
			}
		})
	}
	return out
}

// EnqueuedJob is a job found by [RequireEnqueued]: where it went, its job
// ID, and its value decoded as JSON into T.
type EnqueuedJob[T any] struct {
	Topic  string
	ID     string
	Key    []byte
	Value  T
	Record *kgo.Record
}

// RequireEnqueued fails t unless exactly one job was enqueued on topic
// in src, and returns it with its value decoded into T (failing t when it
// does not decode). Like rivertest.RequireInserted.
func RequireEnqueued[T any](t testing.TB, src Source, topic string) EnqueuedJob[T] {
	t.Helper()
	jobs := RequireEnqueuedMany[T](t, src, topic)
	if len(jobs) != 1 {
		t.Fatalf("shareqtest: %d jobs enqueued on %s, want exactly one", len(jobs), topic)
	}
	return jobs[0]
}

// RequireEnqueuedMany returns every job enqueued on topic in src, in
// order, with values decoded into T, failing t when there is none or a
// value does not decode.
func RequireEnqueuedMany[T any](t testing.TB, src Source, topic string) []EnqueuedJob[T] {
	t.Helper()
	recs := src.EnqueuedRecords(t, topic)
	if len(recs) == 0 {
		t.Fatalf("shareqtest: no job enqueued on %s", topic)
	}
	out := make([]EnqueuedJob[T], len(recs))
	for i, r := range recs {
		j := EnqueuedJob[T]{Topic: r.Topic, ID: enqueue.RecordID(r), Key: r.Key, Record: r}
		if err := json.Unmarshal(r.Value, &j.Value); err != nil {
			t.Fatalf("shareqtest: job %s on %s does not decode into %T: %v (value %.200q)", j.ID, topic, j.Value, err, r.Value)
		}
		out[i] = j
	}
	return out
}

// RequireNotEnqueued fails t if any job was enqueued on topic in src.
func RequireNotEnqueued(t testing.TB, src Source, topic string) {
	t.Helper()
	if recs := src.EnqueuedRecords(t, topic); len(recs) > 0 {
		t.Fatalf("shareqtest: %d job(s) enqueued on %s, want none (first: %s)", len(recs), topic, enqueue.RecordID(recs[0]))
	}
}
