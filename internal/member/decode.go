package member

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// decoder turns the record batches of share fetch responses into records.
//
// A broker answers a share fetch with whole record batches, and in
// record_limit mode a member acquires only some records of a batch at a
// time: a producer batch of 10,000 records fetched 1,000 at a time comes
// back ten times. The decoder skips batches that hold no acquired record
// and keeps a batch it decoded while records of it may still come to this
// member, so each batch is decompressed and decoded about once:
//
//   - the frontier: its last offset is past the highest this member has
//     acquired of the partition (the broker acquires a partition's records
//     in offset order, so the next fetch continues in it);
//   - the continuation: the latest fetch of the partition stopped inside
//     it (a released range acquired again a chunk at a time);
//   - the member holds records of it ([held].batch): a job that fails is
//     released and its record comes again, a lock that runs out brings it
//     again. Their bytes are mostly in memory anyway: the executor has
//     the records.
//
// Every other batch is dropped: when the last record held of it is
// accepted or rejected, or, if a record of it was released or lost (so
// likely to come in the partition's very next fetch), at the next fetch
// that acquires records of its partition, once that fetch has looked its
// records up; and when its partition is no longer assigned. The share
// protocol gives a member again only records released or whose lock ran
// out: those this member released or lost it waits for one fetch; another
// member's come rarely, and decoding their batch again costs less than
// keeping every batch that ever had one (an hour-long soak's steady
// worker grew its heap 4.1 MiB an hour with batches kept after their
// records were done: RELIABILITY.md; BENCHMARKS.md, section 10.1, has
// the figures of this choice). The batches kept are also within limit
// bytes (their records decoded; the oldest dropped first, the newest
// always kept), which the member sets to half its bound on the bytes in
// hand ([Config.MaxBytes]).
//
// Decoded records alias the bytes they were decoded from, so an
// uncompressed batch is copied out of the response first: a record then
// keeps its own batch alive, not the whole response it came in.
type decoder struct {
	decomp kgo.Decompressor
	parts  map[tp]*partBatches
	// order lists the kept batches oldest first; an entry whose seq is not
	// its batch's (dropped, or kept again since) is stale and skipped.
	order []orderEntry
	seq   uint64 // the last seq given
	kept  int    // the batches in parts
	bytes int    // their sizes
	limit int    // the most bytes of batches kept decoded
	// batchSize is, per partition, the most records of a producer batch
	// in the partition's latest response that held acquired records
	// (acquire.go); absent: none seen yet.
	batchSize map[tp]int
	// changes counts the changes to batchSize, so that acquireMode
	// looks at the sizes again only when one moved.
	changes uint64
	decodes int64  // the batches decoded (Stats.BatchesDecoded)
	calls   uint64 // the calls of records, which stamp the batches they use
}

// partBatches are the decoded batches kept of one partition.
type partBatches struct {
	batches map[int64]*decodedBatch // by base offset
	highest int64                   // the highest offset this member acquired of the partition
	latest  int64                   // the highest offset its latest fetch acquired
}

type batchKey struct {
	p    tp
	base int64
}

type orderEntry struct {
	k   batchKey
	seq uint64
}

type decodedBatch struct {
	k      batchKey
	rawLen int   // the raw batch's length, which tells a batch re-written at the same base
	size   int   // what the decoded batch takes: its bytes and its records
	last   int64 // its last offset
	seq    uint64
	used   uint64        // the call of records that last used it
	held   int           // the held entries delivered from it (held.batch)
	back   bool          // a record of it was released or lost since a fetch last used it
	recs   []*kgo.Record // by offset
}

// found is the record of one acquired offset and the batch it came from;
// both nil where the batches hold no record for the offset.
type found struct {
	rec *kgo.Record
	b   *decodedBatch
}

func newDecoder(limit int) *decoder {
	return &decoder{decomp: kgo.DefaultDecompressor(), parts: map[tp]*partBatches{}, limit: limit, batchSize: map[tp]int{}}
}

// records returns the record of every acquired offset, in the order of
// the acquired ranges (sorted by offset), and drops the partition's
// batches no record may come from any more.
func (d *decoder) records(p tp, raw []byte, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) []found {
	n := 0
	for _, a := range acquired {
		n += int(a.LastOffset - a.FirstOffset + 1)
	}
	out := make([]found, 0, n)
	d.calls++
	pb := d.part(p)
	if len(acquired) > 0 {
		pb.latest = acquired[len(acquired)-1].LastOffset
		pb.highest = max(pb.highest, pb.latest)
	}
	var batches []*decodedBatch
	largest := 0
	for len(raw) >= 12 {
		base := int64(binary.BigEndian.Uint64(raw))
		size := 12 + int(int32(binary.BigEndian.Uint32(raw[8:])))
		if size < 12 || size > len(raw) {
			break // a batch cut short at the end of the response
		}
		b := raw[:size]
		raw = raw[size:]
		last := int64(-1) // unknown: decode to find out
		if len(b) >= 27 && b[16] == 2 {
			last = base + int64(int32(binary.BigEndian.Uint32(b[23:27])))
			largest = max(largest, int(last-base+1))
		}
		if last >= 0 && !overlaps(base, last, acquired) {
			continue
		}
		batches = append(batches, d.batch(pb, p, base, b))
	}
	if old, seen := d.batchSize[p]; largest > 0 && (!seen || old != largest) {
		d.batchSize[p] = largest
		d.changes++
	}
	i := 0 // batches hold ascending offsets, as do the acquired ranges
	for _, a := range acquired {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			out = append(out, find(batches, &i, o))
		}
	}
	d.sweep(pb)
	return out
}

// part returns the kept batches of p, made when first asked for.
func (d *decoder) part(p tp) *partBatches {
	pb := d.parts[p]
	if pb == nil {
		pb = &partBatches{batches: map[int64]*decodedBatch{}, highest: -1, latest: -1}
		d.parts[p] = pb
	}
	return pb
}

// sweep drops the batches of pb no record may come from any more, but
// those the current call of records used: the member holds their records
// once it has them.
func (d *decoder) sweep(pb *partBatches) {
	for _, b := range pb.batches {
		if b.used != d.calls && b.held == 0 && !pb.mayBring(b) {
			d.drop(b)
		}
	}
}

// mayBring reports whether the member's next fetch of the partition may
// bring more records of b: b is the frontier (records of it never
// acquired) or the continuation (the latest fetch stopped inside it).
func (pb *partBatches) mayBring(b *decodedBatch) bool {
	return b.last > pb.highest || (b.k.base <= pb.latest && pb.latest < b.last)
}

// hold counts a held entry's delivery from b (nil: none).
func (d *decoder) hold(b *decodedBatch) {
	if b != nil {
		b.held++
	}
}

// letGo uncounts a held entry's delivery from b; done: its record was
// accepted or rejected, so it does not come back. The last of a batch's
// records done drops the batch unless its partition's next fetch may
// bring more of it, or a record of it was released or lost since a fetch
// last used it: then the batch is left to the next fetch of its
// partition, which most likely brings the record again.
func (d *decoder) letGo(b *decodedBatch, done bool) {
	if b == nil {
		return
	}
	b.held--
	if !done {
		b.back = true
	}
	if b.held > 0 || b.back {
		return
	}
	if pb := d.parts[b.k.p]; pb != nil && pb.batches[b.k.base] == b && !pb.mayBring(b) {
		d.drop(b)
	}
}

// find returns the record at offset o and its batch, looking from
// batches[*i] on, where the previous, lower offset was found.
func find(batches []*decodedBatch, i *int, o int64) found {
	for ; *i < len(batches); *i++ {
		b := batches[*i]
		if len(b.recs) == 0 || b.recs[len(b.recs)-1].Offset < o {
			continue
		}
		// A batch's records are at consecutive offsets unless compaction
		// or control records left gaps: then o is at its index from the
		// first, and no search is needed.
		if k := o - b.recs[0].Offset; k >= 0 && k < int64(len(b.recs)) && b.recs[k].Offset == o {
			return found{b.recs[k], b}
		}
		j, ok := slices.BinarySearchFunc(b.recs, o, func(r *kgo.Record, o int64) int {
			switch {
			case r.Offset < o:
				return -1
			case r.Offset > o:
				return 1
			}
			return 0
		})
		if ok {
			return found{b.recs[j], b}
		}
		return found{}
	}
	return found{}
}

func overlaps(base, last int64, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) bool {
	for _, a := range acquired {
		if a.FirstOffset <= last && base <= a.LastOffset {
			return true
		}
	}
	return false
}

// holds reports whether the acquired ranges hold offset last.
func holds(last int64, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) bool {
	for _, a := range acquired {
		if a.FirstOffset <= last && last <= a.LastOffset {
			return true
		}
	}
	return false
}

// batch returns the decoded records of one raw batch, from the kept ones
// when they hold it, and keeps it.
func (d *decoder) batch(pb *partBatches, p tp, base int64, raw []byte) *decodedBatch {
	b := pb.batches[base]
	if b == nil || b.rawLen != len(raw) {
		if b != nil {
			d.drop(b)
		}
		b = d.decode(p, base, raw)
		d.seq++
		b.seq = d.seq
		d.order = append(d.order, orderEntry{b.k, b.seq})
		pb.batches[base] = b
		d.kept++
		d.bytes += b.size
	}
	b.used, b.back = d.calls, false
	for d.bytes > d.limit && len(d.order) > 0 {
		e := d.order[0]
		if ob := d.lookup(e.k); ob != nil && ob.seq == e.seq {
			if ob == b {
				break // the newest is always kept
			}
			d.drop(ob)
		}
		d.order = d.order[1:]
	}
	if len(d.order) > 2*d.kept+64 { // mostly stale entries: compact
		d.order = slices.DeleteFunc(d.order, func(e orderEntry) bool {
			b := d.lookup(e.k)
			return b == nil || b.seq != e.seq
		})
	}
	return b
}

// lookup returns the kept batch k; nil: none.
func (d *decoder) lookup(k batchKey) *decodedBatch {
	if pb := d.parts[k.p]; pb != nil {
		return pb.batches[k.base]
	}
	return nil
}

// recordOverhead is what a decoded record takes beside its bytes: the
// kgo.Record and its pointer in decodedBatch.recs.
const recordOverhead = int(unsafe.Sizeof(kgo.Record{})) + 8

// decode decodes one raw batch.
func (d *decoder) decode(p tp, base int64, raw []byte) *decodedBatch {
	d.decodes++
	rawLen := len(raw)
	if len(raw) >= 23 && raw[16] == 2 && raw[22]&0x07 == 0 {
		raw = bytes.Clone(raw) // uncompressed: the records would alias the response
	}
	fp := kmsg.FetchResponseTopicPartition{Partition: p.part, RecordBatches: raw, HighWatermark: -1, LastStableOffset: -1}
	part, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: p.topic, Partition: p.part, Offset: base}, &fp, d.decomp, nil)
	b := &decodedBatch{k: batchKey{p, base}, rawLen: rawLen, last: base, recs: part.Records}
	payload := 0
	for _, r := range part.Records {
		payload += int(recordBytes(r))
	}
	b.size = max(rawLen, payload) + len(part.Records)*recordOverhead
	if len(raw) >= 27 && raw[16] == 2 {
		b.last = base + int64(int32(binary.BigEndian.Uint32(raw[23:27])))
	} else if n := len(part.Records); n > 0 {
		b.last = part.Records[n-1].Offset
	}
	return b
}

// drop stops keeping b; its entry in order goes stale. The held entries
// delivered from it keep their pointer, and letGo knows it is not kept.
func (d *decoder) drop(b *decodedBatch) {
	pb := d.parts[b.k.p]
	if pb == nil || pb.batches[b.k.base] != b {
		return
	}
	delete(pb.batches, b.k.base)
	d.kept--
	d.bytes -= b.size
}

// forget drops the decoded batches of a topic (it was re-created: its
// offsets start again).
func (d *decoder) forget(topic string) {
	for p := range d.batchSize {
		if p.topic == topic {
			delete(d.batchSize, p)
			d.changes++
		}
	}
	d.forgetParts(func(p tp) bool { return p.topic == topic })
	d.order = slices.DeleteFunc(d.order, func(e orderEntry) bool { return e.k.p.topic == topic })
}

// forgetParts drops the decoded batches of the partitions gone says.
func (d *decoder) forgetParts(gone func(tp) bool) {
	for p, pb := range d.parts {
		if !gone(p) {
			continue
		}
		for _, b := range pb.batches {
			d.drop(b)
		}
		delete(d.parts, p)
	}
}
