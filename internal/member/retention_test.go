package member_test

import (
	"testing"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// A steady stream in which some jobs fail once and are released keeps no
// more decoded batches, however long it runs, than the batch each
// partition's latest fetch stopped inside and the frontier past it: a
// batch whose records are done and that no fetch may bring more of is
// dropped. (The decoder used to keep each batch a redelivered record
// came from until the cache's bound, half of MaxBytes, pushed it out: an
// hour-long soak's steady worker grew its heap 4.1 MiB an hour.) Runs the
// pattern of BenchmarkMemberRedelivered for 8 cycles.
func TestDecodedBatchesStayBoundedUnderRedeliveries(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	const partitions, batch, credit, cycles = 2, 20, 24, 8
	topic, group := c.Topic(t, partitions), c.Group(t)
	w := newBatchWriter(t, c, topic)
	r := start(t, c, group, []string{topic})
	r.mu.Lock()
	r.onDelivery = failOnce(r.m, batch)
	r.mu.Unlock()
	r.m.Grant(credit)
	const bound = 2 * partitions
	for i := range cycles {
		redeliveredCycle(t, w, r, topic, partitions, batch, i+1)
		if s := r.m.Stats(); s.DecodedKept > bound {
			t.Fatalf("after cycle %d (%d records done, %d released once): %d decoded batches kept (%d bytes), want at most %d",
				i+1, s.Acks[member.Accept], s.Acks[member.Release], s.DecodedKept, s.DecodedKeptBytes, bound)
		}
	}
	s := r.m.Stats()
	if want := int64(cycles * 10 * partitions); s.Acks[member.Release] < want {
		t.Errorf("%d records released, want %d: the pattern did not run", s.Acks[member.Release], want)
	}
	t.Logf("%s: %d batches decoded for %d producer batches, %d kept at the end", c.Kind, s.BatchesDecoded, cycles*10*partitions, s.DecodedKept)
	r.leave()
}
