package member

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// decoder turns the record batches of share fetch responses into records.
//
// A broker answers a share fetch with whole record batches, and in
// record_limit mode a member acquires only some records of a batch at a
// time: a producer batch of 10,000 records fetched 1,000 at a time comes
// back ten times. The decoder skips batches that hold no acquired record
// and keeps the batches it decoded whose last record was not acquired yet
// (up to limit bytes of them, the oldest dropped first, the newest always
// kept), so each batch is decompressed and decoded about once. A batch is
// dropped once a fetch acquires its last record (a batch acquired whole is
// never kept): the broker acquires a partition's records in offset order,
// so the batch's records come again only if released, and decoding it
// again then costs less than keeping every finished batch until the limit
// pushes it out (the endurance run's steady worker held its cache full of
// finished batches: RELIABILITY.md). The member sets the limit to half its
// bound on the bytes in hand ([Config.MaxBytes]).
//
// Decoded records alias the bytes they were decoded from, so an
// uncompressed batch is copied out of the response first: a record then
// keeps its own batch alive, not the whole response it came in.
type decoder struct {
	decomp kgo.Decompressor
	cache  map[batchKey]*decodedBatch
	// order lists the kept batches oldest first; an entry whose seq is not
	// its batch's (dropped, or kept again since) is stale and skipped.
	order []orderEntry
	seq   uint64 // the last seq given
	bytes int    // the sizes of the batches in cache
	limit int    // the most bytes of batches kept decoded
	// batchSize is, per partition, the most records of a producer batch
	// in the partition's latest response that held acquired records
	// (acquire.go); absent: none seen yet.
	batchSize map[tp]int
	// changes counts the changes to batchSize, so that acquireMode
	// looks at the sizes again only when one moved.
	changes uint64
	decodes int64 // the batches decoded (Stats.BatchesDecoded)
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
	size int
	seq  uint64        // its entry in order
	recs []*kgo.Record // by offset
}

func newDecoder(limit int) *decoder {
	return &decoder{decomp: kgo.DefaultDecompressor(), cache: map[batchKey]*decodedBatch{}, limit: limit, batchSize: map[tp]int{}}
}

// records returns the record of every acquired offset, in the order of
// the acquired ranges; nil where the batches hold no record for an offset
// (a control record, or a gap of a compacted topic).
func (d *decoder) records(p tp, raw []byte, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) []*kgo.Record {
	n := 0
	for _, a := range acquired {
		n += int(a.LastOffset - a.FirstOffset + 1)
	}
	out := make([]*kgo.Record, 0, n)
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
		batches = append(batches, d.batch(p, base, b, last >= 0 && holds(last, acquired)))
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
	return out
}

// find returns the record at offset o, looking from batches[*i] on, where
// the previous, lower offset was found.
func find(batches []*decodedBatch, i *int, o int64) *kgo.Record {
	for ; *i < len(batches); *i++ {
		recs := batches[*i].recs
		if len(recs) == 0 || recs[len(recs)-1].Offset < o {
			continue
		}
		j, ok := slices.BinarySearchFunc(recs, o, func(r *kgo.Record, o int64) int {
			switch {
			case r.Offset < o:
				return -1
			case r.Offset > o:
				return 1
			}
			return 0
		})
		if ok {
			return recs[j]
		}
		return nil
	}
	return nil
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

// batch returns the decoded records of one raw batch, from the cache when
// it holds them; done says its last record was acquired now: it is
// dropped from the cache (or never put there).
func (d *decoder) batch(p tp, base int64, raw []byte, done bool) *decodedBatch {
	k := batchKey{p, base}
	b := d.cache[k]
	if b == nil || b.size != len(raw) {
		b = d.decode(p, base, raw)
	}
	if done {
		d.drop(k)
		return b
	}
	if d.cache[k] != b {
		d.drop(k)
		d.seq++
		b.seq = d.seq
		d.order = append(d.order, orderEntry{k, b.seq})
		d.cache[k] = b
		d.bytes += b.size
	}
	for d.bytes > d.limit && len(d.order) > 0 {
		e := d.order[0]
		if ob := d.cache[e.k]; ob != nil && ob.seq == e.seq {
			if e.k == k {
				break // the newest is always kept
			}
			d.drop(e.k)
		}
		d.order = d.order[1:]
	}
	if len(d.order) > 2*len(d.cache)+64 { // mostly stale entries: compact
		d.order = slices.DeleteFunc(d.order, func(e orderEntry) bool {
			b := d.cache[e.k]
			return b == nil || b.seq != e.seq
		})
	}
	return b
}

// decode decodes one raw batch.
func (d *decoder) decode(p tp, base int64, raw []byte) *decodedBatch {
	d.decodes++
	if len(raw) >= 23 && raw[16] == 2 && raw[22]&0x07 == 0 {
		raw = bytes.Clone(raw) // uncompressed: the records would alias the response
	}
	fp := kmsg.FetchResponseTopicPartition{Partition: p.part, RecordBatches: raw, HighWatermark: -1, LastStableOffset: -1}
	part, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: p.topic, Partition: p.part, Offset: base}, &fp, d.decomp, nil)
	return &decodedBatch{size: len(raw), recs: part.Records}
}

// drop removes a batch from the cache; its entry in order goes stale.
func (d *decoder) drop(k batchKey) {
	if b := d.cache[k]; b != nil {
		d.bytes -= b.size
		delete(d.cache, k)
	}
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
	for k := range d.cache {
		if k.p.topic == topic {
			d.drop(k)
		}
	}
	d.order = slices.DeleteFunc(d.order, func(e orderEntry) bool { return e.k.p.topic == topic })
}
