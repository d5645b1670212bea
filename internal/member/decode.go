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
// and keeps the batches it decoded of which some records were not
// acquired (up to limit bytes of them, the oldest dropped first, the
// newest always kept), so each batch is decompressed and decoded about
// once. A batch acquired whole is not kept: its records come again only
// if released, and large records come one to a batch. The member sets the limit to half
// its bound on the bytes in hand ([Config.MaxBytes]).
//
// Decoded records alias the bytes they were decoded from, so an
// uncompressed batch is copied out of the response first: a record then
// keeps its own batch alive, not the whole response it came in.
type decoder struct {
	decomp kgo.Decompressor
	cache  map[batchKey]*decodedBatch
	order  []batchKey // oldest first
	bytes  int
	limit  int // the most bytes of batches kept decoded
	// batchSize is, per partition, the most records of a producer batch
	// in the partition's latest response that held acquired records
	// (acquire.go); absent: none seen yet.
	batchSize map[tp]int
	// changes counts the changes to batchSize, so that acquireMode
	// looks at the sizes again only when one moved.
	changes uint64
}

type batchKey struct {
	p    tp
	base int64
}

type decodedBatch struct {
	size int
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
		batches = append(batches, d.batch(p, base, b, last >= 0 && covered(base, last, acquired)))
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

// covered reports whether the acquired ranges (ascending, disjoint) hold
// every offset from base to last.
func covered(base, last int64, acquired []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) bool {
	next := base
	for _, a := range acquired {
		if a.FirstOffset > next {
			break
		}
		next = max(next, a.LastOffset+1)
	}
	return next > last
}

// batch returns the decoded records of one raw batch, from the cache when
// it holds them; whole says every record of it was acquired (it is not
// kept).
func (d *decoder) batch(p tp, base int64, raw []byte, whole bool) *decodedBatch {
	k := batchKey{p, base}
	if b := d.cache[k]; b != nil && b.size == len(raw) {
		return b
	}
	if len(raw) >= 23 && raw[16] == 2 && raw[22]&0x07 == 0 {
		raw = bytes.Clone(raw) // uncompressed: the records would alias the response
	}
	fp := kmsg.FetchResponseTopicPartition{Partition: p.part, RecordBatches: raw, HighWatermark: -1, LastStableOffset: -1}
	part, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: p.topic, Partition: p.part, Offset: base}, &fp, d.decomp, nil)
	b := &decodedBatch{size: len(raw), recs: part.Records}
	if whole {
		return b
	}
	if old := d.cache[k]; old != nil {
		d.bytes -= old.size
	} else {
		d.order = append(d.order, k)
	}
	d.cache[k] = b
	d.bytes += b.size
	for d.bytes > d.limit && len(d.order) > 1 {
		old := d.order[0]
		d.order = d.order[1:]
		if ob := d.cache[old]; ob != nil {
			d.bytes -= ob.size
			delete(d.cache, old)
		}
	}
	return b
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
	d.order = slices.DeleteFunc(d.order, func(k batchKey) bool {
		if k.p.topic != topic {
			return false
		}
		if b := d.cache[k]; b != nil {
			d.bytes -= b.size
			delete(d.cache, k)
		}
		return true
	})
}
