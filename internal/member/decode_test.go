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
	for i, f := range got {
		if f.rec == nil || f.rec.Offset != want[i] || string(f.rec.Value) != fmt.Sprintf("v%d", want[i]) || f.b == nil {
			t.Fatalf("record %d = %+v, want offset %d and its batch", i, f, want[i])
		}
	}
	if d.lookup(batchKey{p, 0}) != nil || d.decodes != 2 {
		t.Errorf("%d batches decoded (0-9 among them: %v), want 2: no batch without an acquired record", d.decodes, d.lookup(batchKey{p, 0}) != nil)
	}
	// The next fetch brings the same batches for the next offsets: the
	// decoded ones are reused.
	first := d.lookup(batchKey{p, 10})
	again := d.records(p, raw, acquired([2]int64{15, 16}))
	if d.lookup(batchKey{p, 10}) != first || len(again) != 2 || again[0].rec.Offset != 15 || again[0].rec != first.recs[5] || d.decodes != 2 {
		t.Error("the second fetch decoded its batch again")
	}
	// An offset no batch holds (a gap) has no record.
	if gap := d.records(p, raw, acquired([2]int64{29, 30})); len(gap) != 2 || gap[0].rec == nil || gap[1].rec != nil || gap[1].b != nil {
		t.Errorf("offsets 29-30 = %v, want the record at 29 and none at 30", gap)
	}
	// The records do not alias the response: it can be freed.
	clear(raw)
	if string(first.recs[5].Value) != "v15" {
		t.Errorf("record 15 reads %q once the response is cleared, want v15", first.recs[5].Value)
	}
	d.forget(topic)
	if d.kept != 0 || d.bytes != 0 || len(d.order) != 0 || len(d.parts) != 0 {
		t.Errorf("after forget: %d batches, %d bytes, %d in order, %d partitions", d.kept, d.bytes, len(d.order), len(d.parts))
	}
}

// A batch acquired whole is kept while its records are held and dropped
// when the last of them is accepted or rejected; the frontier batch, whose
// last record was not acquired, is kept for the next fetch.
func TestDecoderKeepsABatchAcquiredWholeWhileItsRecordsAreHeld(t *testing.T) {
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
	if len(got) != 5 || got[2].rec == nil || string(got[2].rec.Value) != "v2" || got[4].rec == nil || string(got[4].rec.Value) != "v4" {
		t.Fatalf("records %v", got)
	}
	for _, f := range got {
		d.hold(f.b)
	}
	if d.kept != 2 {
		t.Fatalf("%d batches kept while their records are held, want 2", d.kept)
	}
	for i, f := range got {
		d.letGo(f.b, true)
		if i == 1 && d.lookup(batchKey{p, 0}) == nil {
			t.Error("batch 0-2 dropped while offset 2 is held")
		}
	}
	if d.lookup(batchKey{p, 0}) != nil || d.lookup(batchKey{p, 3}) == nil || d.kept != 1 {
		t.Errorf("every record accepted: batch 0-2 kept %v, 3-5 kept %v (%d kept), want only 3-5, whose 5 was not acquired",
			d.lookup(batchKey{p, 0}) != nil, d.lookup(batchKey{p, 3}) != nil, d.kept)
	}
}

// A batch one of whose records was released stays, once its other
// records are done, for the fetch that brings that record again: the
// redelivery of a failed job does not decode its batch again.
func TestDecoderKeepsABatchForItsRecordReleased(t *testing.T) {
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
	fetch := func(first, last int64) []found {
		return d.records(p, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: 1}})
	}
	all := fetch(0, 5)
	for _, f := range all {
		d.hold(f.b)
	}
	d.letGo(all[1].b, false) // offset 1 released: its job failed
	for i, f := range all {
		if i != 1 {
			d.letGo(f.b, true)
		}
	}
	if d.lookup(batchKey{p, 0}) == nil || d.lookup(batchKey{p, 3}) != nil {
		t.Fatalf("every record done but offset 1, released: batch 0-2 kept %v, 3-5 kept %v; want only 0-2",
			d.lookup(batchKey{p, 0}) != nil, d.lookup(batchKey{p, 3}) != nil)
	}
	if again := fetch(1, 1); len(again) != 1 || again[0].rec == nil || string(again[0].rec.Value) != "v1" || d.decodes != 2 {
		t.Errorf("offset 1 again: %v after %d decodes, want v1 from the kept batch (2 decodes)", again, d.decodes)
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

// A batch acquired in pieces is kept while records of it may still come:
// decoded once for all its pieces, and dropped once its last record is
// acquired and its records held are done. A record of it released comes
// again from the kept batch; once done, the batch goes (at once, unless
// the latest fetch stopped inside it). The decoder's
// bookkeeping stays as small as what it keeps.
func TestDecoderKeepsABatchWhileRecordsOfItMayCome(t *testing.T) {
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
	d := newDecoder(32 << 20)
	// take acquires offsets first-last, holds them, and lets every one
	// but keep go (accepted), returning keep's batch.
	take := func(first, last, keep int64) *decodedBatch {
		t.Helper()
		got := d.records(p, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: 1}})
		var kept *decodedBatch
		for i, f := range got {
			if f.rec == nil || f.rec.Offset != first+int64(i) {
				t.Fatalf("offsets %d-%d: %v", first, last, got)
			}
			d.hold(f.b)
			if f.rec.Offset == keep {
				kept = f.b
			} else {
				d.letGo(f.b, true)
			}
		}
		return kept
	}
	var three *decodedBatch // offset 3's, held while its job runs
	for i := int64(0); i < 8; i += 2 {
		if b := take(i, i+1, 3); b != nil {
			three = b
		}
		if d.kept != 1 || d.bytes == 0 {
			t.Fatalf("after offsets %d-%d: %d batches kept (%d bytes), want the batch kept", i, i+1, d.kept, d.bytes)
		}
	}
	take(8, 9, -1)
	if d.kept != 1 || d.decodes != 1 {
		t.Fatalf("after the batch's last record, offset 3 still held: %d kept, %d decodes, want 1 and 1", d.kept, d.decodes)
	}
	d.letGo(three, false) // its job failed: released, it comes again
	if d.kept != 1 {
		t.Fatalf("a record released: %d batches kept, want 1 until the next fetch", d.kept)
	}
	again := take(3, 3, 3)
	if d.decodes != 1 {
		t.Errorf("offset 3 released and acquired again: %d decodes, want 1 (the batch kept)", d.decodes)
	}
	d.letGo(again, true)
	if d.kept != 1 {
		t.Errorf("every record done, the latest fetch stopped inside the batch: %d kept, want 1 (the next fetch may go on in it)", d.kept)
	}
	d.letGo(take(9, 9, 9), true) // offset 9 lost and acquired again, then done
	if d.kept != 0 || d.bytes != 0 || d.decodes != 1 {
		t.Errorf("every record done, the latest fetch at the batch's end: %d batches kept (%d bytes), %d decodes; want none, 1", d.kept, d.bytes, d.decodes)
	}
	// Kept and dropped over and over, the order list does not grow with
	// the count of batches ever decoded, nor does anything else.
	for range 1000 {
		d.letGo(take(4, 4, 4), false)
		d.letGo(take(4, 4, 4), true)
	}
	if len(d.order) > 2*d.kept+64 || len(d.parts) != 1 {
		t.Errorf("order holds %d entries for %d kept batches; %d partitions", len(d.order), d.kept, len(d.parts))
	}
}

// A released range acquired again a chunk at a time, below the highest
// offset the member acquired, is decoded once: the batch a fetch stopped
// inside is kept for the next chunk even when nothing of it is held
// between them. The batch past it, done, is dropped.
func TestDecoderKeepsTheBatchAChunkStoppedInside(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	for b := range 2 { // offsets 0-9, 10-19
		var recs []*kgo.Record
		for i := range 10 {
			recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", 10*b+i)})
		}
		c.ProduceBatch(t, recs...)
	}
	raw := fetchRaw(t, c, topic)
	p := tp{topic, 0}
	d := newDecoder(32 << 20)
	fetch := func(first, last int64) []found {
		return d.records(p, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: first, LastOffset: last, DeliveryCount: 1}})
	}
	all := fetch(0, 19)
	for _, f := range all {
		d.hold(f.b)
	}
	for _, f := range all { // every record released
		d.letGo(f.b, false)
	}
	for first := int64(0); first < 10; first += 3 {
		chunk := fetch(first, min(first+2, 9))
		if first == 0 && d.lookup(batchKey{p, 10}) != nil {
			t.Error("batch 10-19 kept once a fetch went back below it with nothing of it held")
		}
		for _, f := range chunk {
			d.hold(f.b)
		}
		for _, f := range chunk { // accepted before the next chunk
			d.letGo(f.b, true)
		}
	}
	if d.decodes != 2 {
		t.Errorf("%d decodes, want 2: each batch once", d.decodes)
	}
	if d.kept != 0 {
		t.Errorf("%d batches kept once every record is done, want 0", d.kept)
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
		if len(got) != 1 || got[0].rec == nil || got[0].rec.Offset != 5*b {
			t.Fatalf("offset %d: %v", 5*b, got)
		}
		if d.lookup(batchKey{p, 5 * b}) == nil || d.kept != 1 {
			t.Fatalf("after offset %d: %d batches kept (the newest: %v), want only the newest", 5*b, d.kept, d.lookup(batchKey{p, 5 * b}) != nil)
		}
	}
}

// The decoded batches of a partition no longer assigned are dropped when
// the member plans its fetches again; an assigned one's stay.
func TestDecoderForgetsPartitionsNoLongerAssigned(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	c.ProduceBatch(t, &kgo.Record{Topic: topic, Value: []byte("v0")}, &kgo.Record{Topic: topic, Value: []byte("v1")})
	raw := fetchRaw(t, c, topic)
	m, err := New(Config{Client: c.Client(t), Group: "g", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	id := [16]byte{1}
	m.meta.names[id] = topic
	m.group.assigned = map[[16]byte][]int32{id: {0, 1}}
	m.meta.leaders[tp{topic, 0}], m.meta.leaders[tp{topic, 1}] = 1, 1
	// Partition 0's batch (offsets 0-1), its offset 0 acquired: the
	// frontier, kept. Partition 1 (which only the member's plan has) is
	// given the same bytes.
	for part := range int32(2) {
		m.dec.records(tp{topic, part}, raw, []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{{FirstOffset: 0, LastOffset: 0, DeliveryCount: 1}})
	}
	m.replan()
	if m.dec.kept != 2 {
		t.Fatalf("both partitions assigned: %d batches kept, want 2", m.dec.kept)
	}
	m.group.assigned = map[[16]byte][]int32{id: {1}}
	m.replan()
	if m.dec.lookup(batchKey{tp{topic, 0}, 0}) != nil || m.dec.lookup(batchKey{tp{topic, 1}, 0}) == nil || m.dec.kept != 1 {
		t.Errorf("partition 0 no longer assigned: %d batches kept (partition 0's: %v), want only partition 1's",
			m.dec.kept, m.dec.lookup(batchKey{tp{topic, 0}, 0}) != nil)
	}
}
