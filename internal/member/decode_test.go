package member

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
)

// The decoder finds the record of every acquired offset, decodes only the
// batches that hold one, and decodes each batch once across fetches.
func TestDecoderDecodesAcquiredBatchesOnce(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	// Three producer batches of ten records: offsets 0-9, 10-19, 20-29.
	for b := range 3 {
		var recs []*kgo.Record
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", b*10+i)})
		}
		c.ProduceBatch(t, recs...)
	}
	raw := fetchRaw(t, c, topic)
	p := tp{topic, 0}
	acquired := func(ranges ...[2]int64) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
		var out []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
		for _, r := range ranges {
			out = append(out, kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{FirstOffset: r[0], LastOffset: r[1], DeliveryCount: 1})
		}
		return out
	}
	d := newDecoder(32 << 20)
	got := d.records(p, raw, acquired([2]int64{12, 14}, [2]int64{25, 27}))
	want := []int64{12, 13, 14, 25, 26, 27}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r == nil || r.Offset != want[i] || string(r.Value) != fmt.Sprintf("v%d", want[i]) {
			t.Fatalf("record %d = %+v, want offset %d", i, r, want[i])
		}
	}
	if _, ok := d.cache[batchKey{p, 0}]; ok {
		t.Error("the batch with no acquired record (offsets 0-9) was decoded")
	}
	if len(d.cache) != 2 {
		t.Errorf("%d batches decoded, want 2", len(d.cache))
	}
	// The next fetch brings the same batches for the next offsets: the
	// decoded ones are reused.
	first := d.cache[batchKey{p, 10}]
	again := d.records(p, raw, acquired([2]int64{15, 16}))
	if d.cache[batchKey{p, 10}] != first || len(again) != 2 || again[0].Offset != 15 || again[0] != first.recs[5] {
		t.Error("the second fetch decoded its batch again")
	}
	// An offset no batch holds (a gap) has no record.
	if gap := d.records(p, raw, acquired([2]int64{29, 30})); len(gap) != 2 || gap[0] == nil || gap[1] != nil {
		t.Errorf("offsets 29-30 = %v, want the record at 29 and none at 30", gap)
	}
	// The records do not alias the response: it can be freed.
	clear(raw)
	if string(first.recs[5].Value) != "v15" {
		t.Errorf("record 15 reads %q once the response is cleared, want v15", first.recs[5].Value)
	}
	d.forget(topic)
	if len(d.cache) != 0 || d.bytes != 0 || len(d.order) != 0 {
		t.Errorf("after forget: %d batches, %d bytes, %d in order", len(d.cache), d.bytes, len(d.order))
	}
}

// A batch acquired whole is decoded and not kept.
func TestDecoderKeepsNoBatchAcquiredWhole(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	for b := range 2 { // offsets 0-2, 3-5
		c.ProduceBatch(t, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", 3*b)},
			&kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", 3*b+1)}, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", 3*b+2)})
	}
	raw := fetchRaw(t, c, topic)
	p := tp{topic, 0}
	d := newDecoder(32 << 20)
	got := d.records(p, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{
		{FirstOffset: 0, LastOffset: 1, DeliveryCount: 1}, {FirstOffset: 2, LastOffset: 4, DeliveryCount: 1},
	})
	if len(got) != 5 || got[2] == nil || string(got[2].Value) != "v2" || got[4] == nil || string(got[4].Value) != "v4" {
		t.Fatalf("records %v", got)
	}
	if _, ok := d.cache[batchKey{p, 0}]; ok || len(d.cache) != 1 {
		t.Errorf("cached %d batches (batch 0-2 kept: %v), want only 3-5, of which 5 was not acquired", len(d.cache), ok)
	}
}

// fetchRaw returns the raw record batches of partition 0 of topic, from
// offset 0, as a classic Fetch returns them.
func fetchRaw(t *testing.T, c *kafkatest.Cluster, topic string) []byte {
	t.Helper()
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil || len(mresp.Topics) != 1 || len(mresp.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata: %v %+v", err, mresp)
	}
	leader := mresp.Topics[0].Partitions[0].Leader
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 100
	req.MaxBytes = 1 << 20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	ft.TopicID = mresp.Topics[0].TopicID
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition = 0
	fp.FetchOffset = 0
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	resp, err := req.RequestWith(ctx, cl.Broker(int(leader)))
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch: %v %+v", err, resp)
	}
	return resp.Topics[0].Partitions[0].RecordBatches
}

// A batch acquired in pieces is kept while records of it wait to be
// acquired and dropped once its last record is, so a steady worker's cache
// holds only the batches it is part way through; a record released and
// acquired again later decodes its batch anew. The cache's bookkeeping
// stays as small as the cache.
func TestDecoderDropsABatchOnceItsLastRecordIsAcquired(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	var recs []*kgo.Record // one batch: offsets 0-9
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)})
	}
	c.ProduceBatch(t, recs...)
	raw := fetchRaw(t, c, topic)
	p := tp{topic, 0}
	one := func(first, last int64) []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord {
		return []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: 1}}
	}
	d := newDecoder(32 << 20)
	for i := int64(0); i < 8; i += 2 {
		if got := d.records(p, raw, one(i, i+1)); len(got) != 2 || got[0] == nil || got[0].Offset != i {
			t.Fatalf("offsets %d-%d: %v", i, i+1, got)
		}
		if len(d.cache) != 1 || d.bytes == 0 {
			t.Fatalf("after offsets %d-%d: %d batches kept (%d bytes), want the batch kept", i, i+1, len(d.cache), d.bytes)
		}
	}
	if got := d.records(p, raw, one(8, 9)); len(got) != 2 || got[1] == nil || string(got[1].Value) != "v9" {
		t.Fatalf("offsets 8-9: %v", got)
	}
	if len(d.cache) != 0 || d.bytes != 0 {
		t.Errorf("after the batch's last record: %d batches kept (%d bytes), want none", len(d.cache), d.bytes)
	}
	// Released and acquired again: decoded again, and kept while its
	// last record waits.
	if got := d.records(p, raw, one(3, 3)); len(got) != 1 || got[0] == nil || string(got[0].Value) != "v3" {
		t.Fatalf("offset 3 again: %v", got)
	}
	if len(d.cache) != 1 {
		t.Errorf("offset 3 acquired again: %d batches kept, want 1", len(d.cache))
	}
	// Kept and dropped over and over, the order list does not grow with
	// the count of batches ever decoded.
	for range 1000 {
		d.records(p, raw, one(4, 4))
		d.records(p, raw, one(9, 9))
	}
	if len(d.order) > 2*len(d.cache)+64 {
		t.Errorf("order holds %d entries for %d kept batches", len(d.order), len(d.cache))
	}
}

// Over its limit, the cache drops its oldest batches and keeps the newest.
func TestDecoderDropsTheOldestBatchesPastItsLimit(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	for b := range 4 { // offsets 0-4, 5-9, 10-14, 15-19
		var recs []*kgo.Record
		for i := range 5 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", 5*b+i)})
		}
		c.ProduceBatch(t, recs...)
	}
	raw := fetchRaw(t, c, topic)
	p := tp{topic, 0}
	d := newDecoder(1) // any batch is over the limit
	for b := int64(0); b < 4; b++ {
		got := d.records(p, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 5 * b, LastOffset: 5 * b, DeliveryCount: 1}})
		if len(got) != 1 || got[0] == nil || got[0].Offset != 5*b {
			t.Fatalf("offset %d: %v", 5*b, got)
		}
		if _, ok := d.cache[batchKey{p, 5 * b}]; !ok || len(d.cache) != 1 {
			t.Fatalf("after offset %d: %d batches kept (the newest: %v), want only the newest", 5*b, len(d.cache), ok)
		}
	}
}
