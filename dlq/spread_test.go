package dlq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

// parkN parks n jobs of topic in its DLQ topic (topic+TopicSuffix)
// through the middleware on cl: job i has job ID "<prefix>-i", key key
// (nil: none), and was at offset from+i of partition 0.
func parkN(t *testing.T, cl *kgo.Client, topic, prefix string, from, n int, key []byte) {
	t.Helper()
	mw, err := Middleware(cl, Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+n; i++ {
		job := &handler.Job{Topic: topic, Offset: int64(i), Key: key, Value: fmt.Appendf(nil, "payload %d", i),
			Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}}}
		if _, parked := handler.ParkedOf(handler.Chain(failWith(handler.Permanent(errors.New("nope"))), mw).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
}

// replayTo replays dlqTopic's jobs that f selects through cl, and counts
// the replayed jobs per partition they went to.
func replayTo(t *testing.T, cl *kgo.Client, dlqTopic string, f Filter) map[int32]int {
	t.Helper()
	got := map[int32]int{}
	st, err := Replay(context.Background(), cl, dlqTopic, ReplayFilter(f), ReplayLogger(quiet), ReplayOnRecord(func(p *Parked) {
		m, _ := p.LastReplay()
		got[m.Partition]++
	}))
	if err != nil {
		t.Fatalf("replay %s: %+v, %v", f.String(), st, err)
	}
	return got
}

// A replay of a backlog of keyless jobs spreads it evenly over the
// source topic's partitions, as enqueue spreads a burst, whatever the
// partitioner of the client Replay is given (franz-go's default is
// sticky: it put a whole replay on one partition).
func TestReplaySpreadsOverPartitions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"default partitioner", nil},
		{"enqueue partitioner", enqueue.ProducerOpts()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const jobs, partitions = 40, 6
			topic := c.Topic(t, partitions)
			c.CreateTopic(t, topic+TopicSuffix, 1)
			cl := c.Client(t, append([]kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}, tc.opts...)...)
			parkN(t, cl, topic, "spread", 0, jobs, nil)

			got := replayTo(t, cl, topic+TopicSuffix, Filter{})
			total := 0
			for p := range int32(partitions) {
				total += got[p]
				// Round-robin: 40 over 6 is 7 or 6 each.
				if got[p] < jobs/partitions || got[p] > jobs/partitions+1 {
					t.Errorf("partition %d got %d of the %d replayed jobs, want %d or %d: %v", p, got[p], jobs, jobs/partitions, jobs/partitions+1, got)
				}
			}
			if total != jobs {
				t.Errorf("replayed %d jobs, want %d: %v", total, jobs, got)
			}
		})
	}
}

// Jobs with a key stay together on their key's partition, the one
// enqueue (and franz-go's default partitioner) gives the key.
func TestReplayKeepsAKeysJobsOnItsPartition(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 6)
	c.CreateTopic(t, topic+TopicSuffix, 1)
	cl := c.Client(t, kgo.FetchMaxWait(100*time.Millisecond))
	key := []byte("tenant-7")
	parkN(t, cl, topic, "keyed", 0, 10, key)

	want := int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: key}, 6))
	if got := replayTo(t, cl, topic+TopicSuffix, Filter{}); len(got) != 1 || got[want] != 10 {
		t.Errorf("replayed jobs of key %s to partitions %v, want all 10 on partition %d", key, got, want)
	}
}

// Replay produces through a client made with enqueue.ProducerOpts
// itself, so replays of one job each (the console's selection) continue
// one round-robin rather than each starting at a random partition.
func TestReplayCallsShareTheClientsRoundRobin(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 6)
	c.CreateTopic(t, topic+TopicSuffix, 1)
	cl := c.Client(t, append([]kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)}, enqueue.ProducerOpts()...)...)
	parkN(t, cl, topic, "one", 0, 6, nil)

	seen := map[int32]int{}
	for off := range int64(6) {
		for p, n := range replayTo(t, cl, topic+TopicSuffix, Filter{Offsets: OffsetRange{From: off, End: off + 1}}) {
			seen[p] += n
		}
	}
	if len(seen) != 6 {
		t.Errorf("6 replays of one job each on one client went to partitions %v, want each of the 6 once", seen)
	}
}
