package member_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// produceSized writes n records of size bytes each (key and value
// together) over the topic's partitions in turn, one record per produce
// batch.
func produceSized(t testing.TB, c *kafkatest.Cluster, topic string, partitions int32, n, size int) {
	t.Helper()
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(int32(2*size+1024)), kgo.MaxBufferedRecords(1))
	batch := produced.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		key := fmt.Appendf(nil, "b%d-k%d", batch, i)
		value := make([]byte, size-len(key))
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Key: key, Value: value}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// bytesRun acks the deliveries of r as the test asks and tracks the bytes
// of the records in hand (delivered, not yet acked) as the executor would,
// and their peak.
type bytesRun struct {
	*run
	size        int64 // each record's bytes
	inHand      int64 // guarded by r.mu
	peak        int64 // guarded by r.mu
	outstanding []member.Key
}

func startBytes(t *testing.T, c *kafkatest.Cluster, group, topic string, size, bound int64) *bytesRun {
	br := &bytesRun{size: size}
	br.run = start(t, c, group, []string{topic}, func(cfg *member.Config) { cfg.MaxBytes = bound })
	br.mu.Lock()
	br.onDelivery = func(d member.Delivery) {
		br.mu.Lock()
		defer br.mu.Unlock()
		if int64(len(d.Record.Key)+len(d.Record.Value)) != size {
			t.Errorf("delivery %v: %d bytes, want %d", d.Key(), len(d.Record.Key)+len(d.Record.Value), size)
		}
		br.inHand += size
		br.peak = max(br.peak, br.inHand)
		br.outstanding = append(br.outstanding, d.Key())
	}
	br.mu.Unlock()
	return br
}

// ackOldest accepts the oldest delivery not yet acked.
func (br *bytesRun) ackOldest() {
	br.mu.Lock()
	k := br.outstanding[0]
	br.outstanding = br.outstanding[1:]
	br.inHand -= br.size
	br.mu.Unlock()
	br.m.Ack(k, member.Accept)
}

// Past Config.MaxBytes the member fetches nothing though it has credit
// and records wait; each job that ends frees its bytes and fetching goes
// on; the bytes in hand never exceed the bound plus one record (the one
// fetch's overshoot bytes.go defines), and every record is delivered
// once.
func TestMaxBytesBoundsRecordsInHand(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	const n, size, bound = 24, 100 << 10, 350 << 10
	produceSized(t, c, topic, 1, n, size)
	r := startBytes(t, c, group, topic, size, bound)
	r.m.Grant(n)

	// The bound is reached: 4 records (the fourth over it).
	r.waitFor("the bound reached", func() bool { return r.inHand >= bound })
	r.mu.Lock()
	first := len(r.deliveries)
	r.mu.Unlock()
	if s := r.m.Stats(); s.HeldBytes != int64(first)*size || s.Credit != n-first {
		t.Errorf("stats %+v after %d deliveries: want %d bytes in hand, credit %d", s, first, first*size, n-first)
	}
	// A renewal is answered after any fetch the member sent before it
	// (one request of a session at a time), and a fetch would bring
	// records at once: none came, so none was sent.
	fetches := r.m.Stats().Fetches
	r.mu.Lock()
	k := r.outstanding[0]
	r.mu.Unlock()
	r.m.Renew(k)
	r.waitFor("the renewal", func() bool { return len(r.renewals) == 1 })
	r.mu.Lock()
	if len(r.deliveries) != first || r.renewals[0].Err != nil {
		t.Errorf("with the bound reached: %d deliveries (want %d), renewal %v", len(r.deliveries), first, r.renewals[0])
	}
	r.mu.Unlock()
	if s := r.m.Stats(); s.Fetches != fetches {
		t.Errorf("%d fetches answered with the bound reached", s.Fetches-fetches)
	}

	// Each ack frees room; run the rest, acking the oldest as records come.
	for acked := 0; acked < n; acked++ {
		r.waitFor(fmt.Sprintf("a record to ack (%d acked)", acked), func() bool { return len(r.outstanding) > 0 })
		r.ackOldest()
	}
	r.ackedN(n)
	r.mu.Lock()
	seen := map[string]bool{}
	for _, d := range r.deliveries {
		if seen[string(d.Record.Key)] {
			t.Errorf("%v delivered twice", d.Key())
		}
		seen[string(d.Record.Key)] = true
	}
	if len(seen) != n || r.peak > bound+size {
		t.Errorf("%d records delivered (want %d); peak in hand %d bytes, want at most the bound %d plus one record %d", len(seen), n, r.peak, bound, size)
	}
	r.mu.Unlock()
	if s := r.m.Stats(); s.HeldBytes != 0 || s.Held != 0 {
		t.Errorf("stats %+v after every ack: want nothing in hand", s)
	}
	waitLag(t, c, group, topic, 1)
	r.leave()
}

// A record larger than the whole bound is still delivered, alone: the
// member asks for one record when nothing else is in hand.
func TestMaxBytesRecordLargerThanBound(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	const n, size, bound = 4, 200 << 10, 50 << 10
	produceSized(t, c, topic, 1, n, size)
	r := startBytes(t, c, group, topic, size, bound)
	r.m.Grant(n)
	for acked := 0; acked < n; acked++ {
		r.waitFor(fmt.Sprintf("a record to ack (%d acked)", acked), func() bool { return len(r.outstanding) > 0 })
		r.ackOldest()
	}
	r.ackedN(n)
	r.mu.Lock()
	if len(r.deliveries) != n || r.peak != size {
		t.Errorf("%d deliveries (want %d), peak in hand %d bytes (want one record, %d)", len(r.deliveries), n, r.peak, size)
	}
	r.mu.Unlock()
	waitLag(t, c, group, topic, 1)
	r.leave()
}

// With partitions on several brokers the sessions share the room: the
// bytes in hand stay within the bound plus one record per broker (kfake,
// 3 brokers; on the single test broker, one session).
func TestMaxBytesSharedBetweenSessions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, kafkatest.Brokers(3))
	const partitions, n, size, bound = 6, 36, 100 << 10, 350 << 10
	topic, group := c.Topic(t, partitions), c.Group(t)
	produceSized(t, c, topic, partitions, n, size)
	brokers := 1
	if f := c.Fake(); f != nil {
		leaders := map[int32]bool{}
		for p := range int32(partitions) {
			leaders[f.LeaderFor(topic, p)] = true
		}
		brokers = len(leaders)
	}
	r := startBytes(t, c, group, topic, size, bound)
	r.m.Grant(n)
	for acked := 0; acked < n; acked++ {
		r.waitFor(fmt.Sprintf("a record to ack (%d acked)", acked), func() bool { return len(r.outstanding) > 0 })
		r.ackOldest()
	}
	r.ackedN(n)
	r.mu.Lock()
	seen := map[string]bool{}
	for _, d := range r.deliveries {
		seen[string(d.Record.Key)] = true
	}
	if len(r.deliveries) != n || len(seen) != n || r.peak > bound+int64(brokers)*size {
		t.Errorf("%d deliveries of %d records (want %d); peak in hand %d bytes, want at most the bound %d plus %d records of %d",
			len(r.deliveries), len(seen), n, r.peak, bound, brokers, size)
	}
	t.Logf("%s: %d brokers, peak in hand %d bytes, sessions opened %d", c.Kind, brokers, r.peak, r.m.Stats().SessionsOpened)
	r.mu.Unlock()
	waitLag(t, c, group, topic, partitions)
	r.leave()
}
