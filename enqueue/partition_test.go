package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/kafkatest"
)

// perPartition returns how many of recs are on each of n partitions.
func perPartition(recs []*kgo.Record, n int) []int {
	got := make([]int, n)
	for _, r := range recs {
		got[r.Partition]++
	}
	return got
}

// One EnqueueMany of keyless jobs puts the same number on every
// partition: each partition's share-group member gets its share of the
// burst.
func TestEnqueueManySpreadsKeylessJobsOverPartitions(t *testing.T) {
	t.Parallel()
	const partitions, perPart = 6, 4
	c := kafkatest.New(t)
	topic := c.Topic(t, partitions)
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]enqueue.Job, partitions*perPart)
	for i := range jobs {
		jobs[i] = enqueue.NewJob(topic, i)
	}
	if _, err := q.EnqueueMany(t.Context(), jobs...); err != nil {
		t.Fatal(err)
	}
	got := perPartition(c.Consume(t, topic, len(jobs)), partitions)
	for _, n := range got {
		if n != perPart {
			t.Fatalf("jobs per partition = %v, want %d on each", got, perPart)
		}
	}
}

// Single Enqueue calls, each its own produce, also go round-robin.
func TestEnqueueSpreadsSingleJobs(t *testing.T) {
	t.Parallel()
	const partitions = 3
	c := kafkatest.New(t)
	topic := c.Topic(t, partitions)
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 * partitions {
		if _, err := q.Enqueue(t.Context(), topic, i); err != nil {
			t.Fatal(err)
		}
	}
	got := perPartition(c.Consume(t, topic, 2*partitions), partitions)
	for _, n := range got {
		if n != 2 {
			t.Fatalf("jobs per partition = %v, want 2 on each", got)
		}
	}
}

// A keyed job goes where franz-go's default partitioner (Kafka's murmur2
// hash) puts it, so switching to enqueue.Partitioner moves no key.
func TestKeyedJobsKeepTheirPartition(t *testing.T) {
	t.Parallel()
	const partitions = 6
	c := kafkatest.New(t)
	topic := c.Topic(t, partitions)
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []enqueue.Job
	for i := range 60 {
		jobs = append(jobs, enqueue.NewJob(topic, i, enqueue.Key(fmt.Appendf(nil, "user-%d", i%12))))
	}
	if _, err := q.EnqueueMany(t.Context(), jobs...); err != nil {
		t.Fatal(err)
	}
	// The same keys through a client with franz-go's default partitioner.
	def := c.Client(t)
	var recs []*kgo.Record
	for i := range 12 {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "user-%d", i)})
	}
	if err := def.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{}
	for _, r := range recs {
		want[string(r.Key)] = r.Partition
	}
	spread := map[int32]bool{}
	for _, r := range c.Consume(t, topic, len(jobs)+len(recs)) {
		if r.Partition != want[string(r.Key)] {
			t.Fatalf("key %s on partition %d, franz-go's default puts it on %d", r.Key, r.Partition, want[string(r.Key)])
		}
		spread[r.Partition] = true
	}
	if len(spread) < 2 {
		t.Fatalf("12 keys all on one partition: the test would not notice a partitioner that ignores keys")
	}
}

func TestNewRefusesAStickyPartitioner(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		ok   bool
	}{
		{"franz-go's default", nil, false},
		{"StickyPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.StickyPartitioner())}, false},
		{"StickyKeyPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}, false},
		{"UniformBytesPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.UniformBytesPartitioner(1<<20, false, true, nil))}, false},
		{"ProducerOpts", enqueue.ProducerOpts(), true},
		{"RoundRobinPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}, true},
		{"ManualPartitioner", []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := enqueue.New(c.Client(t, tc.opts...))
			if tc.ok {
				if err != nil {
					t.Fatalf("New = %v, want success", err)
				}
				return
			}
			if !errors.Is(err, enqueue.ErrStickyPartitioner) {
				t.Fatalf("New = %v, want ErrStickyPartitioner", err)
			}
			if !strings.Contains(err.Error(), "kgo.RecordPartitioner(enqueue.Partitioner())") {
				t.Fatalf("error %q does not say what to add", err)
			}
		})
	}
}

type producerFunc func(rs ...*kgo.Record) kgo.ProduceResults

func (f producerFunc) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	return f(rs...)
}

// A Producer that does not report its options is trusted.
func TestNewAcceptsOtherProducers(t *testing.T) {
	t.Parallel()
	if _, err := enqueue.New(producerFunc(func(...*kgo.Record) kgo.ProduceResults { return nil })); err != nil {
		t.Fatalf("New(a Producer without OptValue) = %v", err)
	}
}
