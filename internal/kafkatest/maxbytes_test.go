package kafkatest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A record_limit ShareFetch acquires by count: MaxRecords bounds it, and
// MaxBytes (PartitionMaxBytes too) does not, on kfake and on Kafka 4.4.0
// alike: with MaxBytes 25 KiB both acquired all eight 10 KiB batches
// waiting. The member bounds its bytes in hand by MaxRecords for that
// reason (internal/member, bytes.go).
func TestShareFetchAcquiresByCountNotBytes(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	const size = 10 << 10
	p := c.Client(t, kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 8 { // one batch each: offsets 0..7
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "r%d", i), Value: make([]byte, size)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	a := joinShare(t, c, "a", group, topic)
	fetch := func(maxRecords int32) fetchResult {
		t.Helper()
		var r fetchResult
		deadline := time.Now().Add(wireWait)
		for len(r.recs) == 0 && time.Now().Before(deadline) {
			req := a.fetchReq(maxRecords)
			req.MaxBytes = 2*size + size/2
			for i := range req.Topics[0].Partitions {
				req.Topics[0].Partitions[i].PartitionMaxBytes = req.MaxBytes
			}
			r = a.sendFetch(a.cl, req)
			a.advance(r.err)
			a.okFetch(r)
		}
		return r
	}
	wantOffsets(t, "a, MaxRecords 1, MaxBytes 25 KiB", fetch(1).recs, 0)
	wantOffsets(t, "a, MaxRecords 100, MaxBytes 25 KiB", fetch(100).recs, 1, 2, 3, 4, 5, 6, 7)
	a.okAck(a.ack(ackBatch{p: 0, first: 0, last: 7, types: []int8{ackAccept}}))
}
