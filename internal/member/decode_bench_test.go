package member_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// BenchmarkMemberRedelivered measures what the member keeps decoded
// under a steady stream in which some jobs fail once and are released:
// b.N cycles of 10 compressed producer batches of 20 records on each of 2
// partitions, the record at offset 3 of each batch released on its first
// delivery and accepted on its second, every other record accepted at
// once, a credit of 24. It reports the decoded batches the member keeps
// (and their bytes) after half the cycles and after all of them (flat:
// the same), the batches decoded per producer batch, and the process's
// heap's live bytes after a collection at both points (on kfake the
// broker's log is in it).
//
//	go test -run '^$' -bench MemberRedelivered -benchtime 40x ./internal/member
func BenchmarkMemberRedelivered(b *testing.B) {
	c := kafkatest.New(b)
	const partitions, batch, credit = 2, 20, 24
	topic, group := c.Topic(b, partitions), c.Group(b)
	w := newBatchWriter(b, c, topic)
	r := start(b, c, group, []string{topic})
	r.mu.Lock()
	r.onDelivery = failOnce(r.m, batch)
	r.mu.Unlock()
	r.m.Grant(credit)
	var half member.Stats
	var heapHalf uint64
	cycles := b.N
	for i := range cycles {
		redeliveredCycle(b, w, r, topic, partitions, batch, i+1)
		if i+1 == (cycles+1)/2 {
			half, heapHalf = r.m.Stats(), heapAlloc()
		}
	}
	s, heapEnd := r.m.Stats(), heapAlloc()
	b.ReportMetric(float64(half.DecodedKept), "kept-half")
	b.ReportMetric(float64(s.DecodedKept), "kept-end")
	b.ReportMetric(float64(s.DecodedKeptBytes), "kept-bytes-end")
	b.ReportMetric(float64(s.BatchesDecoded)/float64(cycles*partitions*10), "decodes/batch")
	b.ReportMetric(float64(heapHalf)/(1<<20), "heap-MiB-half")
	b.ReportMetric(float64(heapEnd)/(1<<20), "heap-MiB-end")
	r.leave()
}

// heapAlloc is the bytes of the heap's live objects after a collection:
// the least of five, 20 ms apart, so that a request in flight's buffers
// (a fetch's, the broker's on kfake) count less.
func heapAlloc() uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		least = min(least, ms.HeapAlloc)
		time.Sleep(20 * time.Millisecond)
	}
	return least
}

// failOnce is an onDelivery that releases the record at offset 3 of each
// producer batch of size records on its first delivery and accepts every
// other delivery, granting its credit back.
func failOnce(m *member.Member, size int64) func(member.Delivery) {
	return func(d member.Delivery) {
		if d.Count == 1 && d.Record.Offset%size == 3 {
			m.Ack(d.Key(), member.Release)
		} else {
			m.Ack(d.Key(), member.Accept)
		}
		m.Grant(1)
	}
}

// redeliveredCycle writes the cycle'th 10 producer batches of size records
// to each partition and waits for every record written so far to be
// accepted.
func redeliveredCycle(t testing.TB, w *batchWriter, r *run, topic string, partitions int32, size, cycle int) {
	t.Helper()
	for range 10 {
		var recs []*kgo.Record
		for p := range partitions {
			for i := range size {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "cycle %d record %d of a batch, some padding to compress", cycle, i)})
			}
		}
		w.write(t, recs)
	}
	want := int64(cycle * 10 * size * int(partitions))
	r.waitFor(fmt.Sprintf("cycle %d accepted", cycle), func() bool { return r.m.Stats().Acks[member.Accept] >= want })
	r.mu.Lock()
	r.deliveries, r.acked = nil, nil // what the member keeps alive, not the harness
	r.mu.Unlock()
}

// BenchmarkMemberReleasedChunks measures decoding when a released range is
// acquired again a few records at a time: 10 producer batches of 2,000
// records (zstd, 100-byte values) on one partition, each acquired whole
// (a credit of 2,000), all its records released at once, then acquired
// again with a credit of 24 and accepted. The baseline, in the same run,
// takes the same records with a credit of 24 and accepts them on their
// first delivery. It reports the wall and CPU time per record of each
// (from the first delivery; the CPU's includes kfake's share on kfake),
// the ratio of the released run's to the baseline's, and the batches
// decoded per producer batch of each.
//
//	go test -run '^$' -bench MemberReleasedChunks -benchtime 1x ./internal/member
func BenchmarkMemberReleasedChunks(b *testing.B) {
	c := kafkatest.New(b)
	const batches, size = 10, 2000
	var base, rel chunkRun
	for b.Loop() {
		topic := c.Topic(b, 1)
		produceBig(b, c, topic, batches, size)
		base = runChunks(b, c, topic, batches, size, false)
		topic = c.Topic(b, 1)
		produceBig(b, c, topic, batches, size)
		rel = runChunks(b, c, topic, batches, size, true)
	}
	records := float64(batches * size)
	b.ReportMetric(float64(base.wall.Nanoseconds())/records, "base-ns/record")
	b.ReportMetric(float64(rel.wall.Nanoseconds())/records, "released-ns/record")
	b.ReportMetric(float64(base.cpu)/records, "base-cpu-ns/record")
	b.ReportMetric(float64(rel.cpu)/records, "released-cpu-ns/record")
	b.ReportMetric(float64(rel.cpu)/float64(base.cpu), "cpu-ratio")
	b.ReportMetric(float64(base.decodes)/batches, "base-decodes/batch")
	b.ReportMetric(float64(rel.decodes)/batches, "released-decodes/batch")
}

type chunkRun struct {
	wall    time.Duration
	cpu     int64
	decodes int64
}

// runChunks runs a member on topic's batches of size records; released:
// each batch is taken whole, released, and taken again 24 at a time.
func runChunks(b *testing.B, c *kafkatest.Cluster, topic string, batches, size int, released bool) chunkRun {
	const chunk = 24
	r := start(b, c, c.Group(b), []string{topic})
	var began time.Time
	var taken []member.Key
	again := 0 // records of the current batch accepted on their second delivery
	r.mu.Lock()
	r.onDelivery = func(d member.Delivery) {
		if began.IsZero() {
			began = time.Now()
		}
		switch {
		case !released:
			r.m.Ack(d.Key(), member.Accept)
			r.m.Grant(1)
		case d.Count == 1:
			if taken = append(taken, d.Key()); len(taken) == size {
				for _, k := range taken {
					r.m.Ack(k, member.Release)
				}
				taken = taken[:0]
				r.m.Grant(chunk)
			}
		default:
			r.m.Ack(d.Key(), member.Accept)
			if again++; again+chunk <= size {
				r.m.Grant(1) // the batch's released records, chunk at a time
			} else if again == size {
				again = 0
				r.m.Grant(size) // the next batch, whole
			}
		}
	}
	r.mu.Unlock()
	cpu := cpuTime(b)
	if released {
		r.m.Grant(size)
	} else {
		r.m.Grant(chunk)
	}
	r.waitFor("every record accepted", func() bool { return r.m.Stats().Acks[member.Accept] >= int64(batches*size) })
	out := chunkRun{cpu: cpuTime(b) - cpu, decodes: r.m.Stats().BatchesDecoded}
	r.mu.Lock()
	out.wall = time.Since(began)
	r.mu.Unlock()
	r.leave()
	return out
}

// produceBig writes batches producer batches of size records of 100 bytes
// each, zstd-compressed, to partition 0 of topic.
func produceBig(b *testing.B, c *kafkatest.Cluster, topic string, batches, size int) {
	w := newBatchWriter(b, c, topic, kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerBatchMaxBytes(4<<20))
	for i := range batches {
		recs := make([]*kgo.Record, size)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "batch %04d record %06d %070d", i, j, j)}
		}
		w.write(b, recs)
	}
}

// batchWriter writes producer batches with one client (kafkatest's
// ProduceBatch makes one a call, which a benchmark's heap would count).
type batchWriter struct{ cl *kgo.Client }

// newBatchWriter returns a batchWriter for topic, once its client knows
// the topic's partitions.
func newBatchWriter(t testing.TB, c *kafkatest.Cluster, topic string, opts ...kgo.Opt) *batchWriter {
	t.Helper()
	cl := c.Client(t, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing(), kgo.MaxBufferedRecords(1 << 16)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A record for a partition the topic lacks fails once the client
	// knows its partitions (as in kafkatest's ProduceBatch): records
	// produced after it wait for the flush.
	done := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: math.MaxInt32}, func(_ *kgo.Record, err error) { done <- err })
	if err := <-done; err == nil || ctx.Err() != nil {
		t.Fatalf("loading the partitions of %s: %v", topic, err)
	}
	return &batchWriter{cl}
}

// write writes recs as one producer batch per partition, as long as they
// fit in one.
func (w *batchWriter) write(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, len(recs))
	for _, r := range recs {
		w.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
	}
	if err := w.cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for range recs {
		if err := <-errs; err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}
