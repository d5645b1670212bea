package member_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// produceBatches writes n producer batches of size records each to
// partition 0 (kafkatest's ProduceBatch: each a batch of its own).
func produceBatches(t *testing.T, c *kafkatest.Cluster, topic string, n, size int) {
	t.Helper()
	for b := range n {
		recs := make([]*kgo.Record, size)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "b%d-%d", b, i)}
		}
		c.ProduceBatch(t, recs...)
	}
}

// A fetch is record_limit until the member has seen the partition's
// producer batches and while its credit is less than one; then it is
// batch_optimized. On Kafka that may acquire past the credit (the rest of
// a batch): those records are delivered, not released, the credit goes
// below 0 and later grants repay it, and every record is delivered once.
func TestBatchOptimizedOnceTheCreditCoversABatch(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	const batches, size = 5, 40
	produceBatches(t, c, topic, batches, size)
	r := start(t, c, group, []string{topic})
	acked := 0
	accept := func(ds []member.Delivery) {
		for _, d := range ds[acked:] {
			r.m.Ack(d.Key(), member.Accept)
		}
		acked = len(ds)
	}

	// Nothing seen yet: record_limit, exactly the credit.
	r.m.Grant(10)
	accept(r.deliveriesN(10))
	// Seen: batches of 40, credit 10: still record_limit.
	r.m.Grant(10)
	ds := r.deliveriesN(20)
	if s := r.m.Stats(); s.BatchFetches != 0 || s.OverCredit != 0 || len(ds) != 20 || s.Credit != 0 || s.WholeBatches != size {
		t.Fatalf("after credits of 10 and 10 on batches of %d: %d deliveries, stats %+v; want 20, no batch_optimized fetch, WholeBatches %d", size, len(ds), s, size)
	}
	accept(ds)
	// A credit that covers a batch: batch_optimized.
	r.m.Grant(50)
	ds = r.deliveriesN(70)
	got := len(ds) - 20
	s := r.m.Stats()
	t.Logf("%s: a batch_optimized fetch for 50 records, 20 left of the first batch of %d: %d delivered", c.Kind, size, got)
	if s.BatchFetches < 1 || got > 50+size || s.Credit != 50-got || s.OverCredit != int64(got-50) {
		t.Fatalf("after a credit of 50: %d delivered, stats %+v; want a batch_optimized fetch, at most one batch past the credit, Credit = 50 - delivered", got, s)
	}
	accept(ds)
	// Repay the debt and take the rest.
	r.m.Grant(batches*size - 70)
	ds = r.deliveriesN(batches * size)
	accept(ds)
	r.ackedN(batches * size)
	seen := map[member.Key]bool{}
	for _, d := range ds {
		if seen[d.Key()] || d.Count != 1 {
			t.Fatalf("%v delivered twice or with count %d", d.Key(), d.Count)
		}
		seen[d.Key()] = true
	}
	if s := r.m.Stats(); len(seen) != batches*size || s.Credit != 0 {
		t.Fatalf("%d records delivered, stats %+v; want %d, credit 0", len(seen), s, batches*size)
	}
	waitLag(t, c, group, topic, 1)
	r.leave()
}
