package member

import "iter"

// KeyMap maps record keys to values, by partition and then by offset. A
// map keyed by the whole [Key] hashes and compares the topic's name at
// every lookup; here a lookup finds the partition by its name only when
// it is not the one of the last lookup, and the offset in a window of
// the partition's offsets (offsets.go's window below), by subtraction.
// Runs of keys of one partition are the common case: a fetch acquires
// records partition by partition, a request acknowledges them per
// partition, and jobs end in about the order they were fetched. At short
// jobs, map work keyed by Key, then by offset, was the largest part of
// the member's and the executor's own CPU per job.
//
// The zero V is no value: Get returns it for a missing key, and Put of it
// deletes the key. The zero KeyMap is empty and ready to use. A KeyMap
// keeps a partition's (empty) table once it held a key of it, so that a
// partition whose records come and go does not make a table each time;
// tables are as many as the partitions ever held. It is not safe for
// concurrent use.
type KeyMap[V comparable] struct {
	parts map[tp]*offsets[V]
	last  *offsets[V] // the partition of the last lookup; nil: none yet
	n     int
}

// offsets is one partition's table of a KeyMap: a window, a slice of
// values indexed by offset − base, for the offsets of a partition's keys
// in hand, which lie close together (a few fetches' worth, the gaps
// being records other members took); and a map, far, for keys that fell
// out of it: a record held long behind the others (a long job, a
// record held for a retry) once the window has moved on. The window
// spans at most windowSpan(keys) offsets; a key past that moves the
// window's keys to far and starts the window again at the new key. The
// window's first slot always holds a value (deleting it moves the window
// up to the next key), and far holds no key inside the window's span.
type offsets[V comparable] struct {
	p    tp
	base int64 // the offset of win[0]
	win  []V   // values by offset − base; the zero V: no key
	nwin int   // keys in win
	// buf is win's whole array, from its first slot: the window moves up
	// through it as its first keys go, and moves back down to its start
	// when it reaches the end with room to spare, so that a partition's
	// steady flow of keys allocates nothing. Its slots outside win are
	// zero.
	buf []V
	far map[int64]V
	// farMax bounds the keys in far from above while far is not empty:
	// a window started anew begins past it, so that far's keys stay out
	// of the window's span.
	farMax int64
}

// windowSpan is the most offsets a window of n keys spans: the keys of a
// partition in hand are a few fetches' worth, and with other members
// taking records of the partition in between (a share group's members
// fetch every partition) they spread over a few times as many offsets.
func windowSpan(n int) int64 { return 256 + 16*int64(n) }

func (o *offsets[V]) get(off int64) V {
	if i := off - o.base; uint64(i) < uint64(len(o.win)) {
		return o.win[i]
	}
	if len(o.far) > 0 {
		return o.far[off]
	}
	var zero V
	return zero
}

// put sets off's value (v is not the zero V) and returns 1 if off is a
// new key, 0 if it replaced a value.
func (o *offsets[V]) put(off int64, v V) int {
	var zero V
	if i := off - o.base; uint64(i) < uint64(len(o.win)) {
		added := 0
		if o.win[i] == zero {
			o.nwin++
			added = 1
		}
		o.win[i] = v
		return added
	}
	// Far keys lie before the window while it holds keys, and a window
	// starts past them.
	if len(o.win) > 0 {
		if off < o.base {
			return o.putFar(off, v)
		}
	} else if len(o.far) > 0 && off <= o.farMax {
		return o.putFar(off, v)
	}
	switch {
	case len(o.win) == 0:
		o.base = off
	case off-o.base >= windowSpan(o.nwin+1):
		// Too far ahead: the window's keys move to far, and the
		// window starts again at off (past them all).
		for i, w := range o.win {
			if w != zero {
				o.putFar(o.base+int64(i), w)
			}
		}
		clear(o.win)
		o.win, o.nwin, o.base = o.win[:0], 0, off
	}
	// off is at or past the window's end: extend it.
	n, need := len(o.win), int(off-o.base)+1
	if need > cap(o.win) {
		o.room(need)
	}
	o.win = o.win[:need]
	clear(o.win[n:])
	o.win[need-1] = v
	o.nwin++
	return 1
}

// room makes win's capacity at least need: it moves win down to buf's
// start when need fits in half of buf (the moves then cost O(1) a key
// over the keys appended between them), else into a new buf twice
// need's size.
func (o *offsets[V]) room(need int) {
	n := len(o.win)
	if need <= len(o.buf)/2 {
		copy(o.buf, o.win)
		clear(o.buf[n:])
		o.win = o.buf[:n]
		return
	}
	o.buf = make([]V, max(2*need, 16))
	copy(o.buf, o.win)
	o.win = o.buf[:n]
}

func (o *offsets[V]) putFar(off int64, v V) int {
	if o.far == nil {
		o.far = map[int64]V{}
	}
	if len(o.far) == 0 || off > o.farMax {
		o.farMax = off
	}
	n := len(o.far)
	o.far[off] = v
	return len(o.far) - n
}

// del deletes off and returns 1 if it was a key, else 0.
func (o *offsets[V]) del(off int64) int {
	var zero V
	if i := off - o.base; uint64(i) < uint64(len(o.win)) {
		if o.win[i] == zero {
			return 0
		}
		o.win[i] = zero
		if o.nwin--; o.nwin == 0 {
			o.win = o.win[:0]
		} else if i == 0 {
			// Move the window up to its next key. Its slots before
			// that are zero and out of the slice; append reuses them
			// once it reallocates.
			k := 1
			for o.win[k] == zero {
				k++
			}
			o.win, o.base = o.win[k:], o.base+int64(k)
		}
		return 1
	}
	if len(o.far) == 0 {
		return 0
	}
	n := len(o.far)
	delete(o.far, off)
	return n - len(o.far)
}

// len is the number of keys of the partition.
func (o *offsets[V]) len() int { return o.nwin + len(o.far) }

// clear deletes every key of the partition.
func (o *offsets[V]) clear() {
	clear(o.win)
	o.win, o.nwin = o.win[:0], 0
	clear(o.far)
}

// all yields the partition's keys: the window's in order, then far's in
// no set order. The body may delete keys, and must not put any.
func (o *offsets[V]) all(yield func(int64, V) bool) bool {
	var zero V
	// By offset, the window's bounds read again each time: a deletion
	// may move it up.
	for off := o.base; off-o.base < int64(len(o.win)); off++ {
		if i := off - o.base; i >= 0 {
			if v := o.win[i]; v != zero && !yield(off, v) {
				return false
			}
		} else {
			off = o.base - 1 // the window moved past off
		}
	}
	for off, v := range o.far {
		if !yield(off, v) {
			return false
		}
	}
	return true
}

// part returns the table of topic/partition; nil if it never held a key,
// unless create is set (then it makes it).
func (km *KeyMap[V]) part(topic string, partition int32, create bool) *offsets[V] {
	// A string comparison of the same string (the record's Topic is one
	// string per topic, from the decoder) compares the pointers first.
	if l := km.last; l != nil && l.p.part == partition && l.p.topic == topic {
		return l
	}
	p := tp{topic, partition}
	o := km.parts[p]
	if o == nil {
		if !create {
			return nil
		}
		if km.parts == nil {
			km.parts = map[tp]*offsets[V]{}
		}
		o = &offsets[V]{p: p}
		km.parts[p] = o
	}
	km.last = o
	return o
}

// Get returns k's value; the zero V if k is not in the map.
func (km *KeyMap[V]) Get(k Key) V {
	if o := km.part(k.Topic, k.Partition, false); o != nil {
		return o.get(k.Offset)
	}
	var zero V
	return zero
}

// Put sets k's value; the zero V deletes k.
func (km *KeyMap[V]) Put(k Key, v V) {
	var zero V
	if v == zero {
		km.Delete(k)
		return
	}
	km.n += km.part(k.Topic, k.Partition, true).put(k.Offset, v)
}

// Delete removes k, if it is there.
func (km *KeyMap[V]) Delete(k Key) {
	if o := km.part(k.Topic, k.Partition, false); o != nil {
		km.n -= o.del(k.Offset)
	}
}

// clearPart removes every key of the partition whose table is o.
func (km *KeyMap[V]) clearPart(o *offsets[V]) {
	km.n -= o.len()
	o.clear()
}

// Len is the number of keys in the map.
func (km *KeyMap[V]) Len() int { return km.n }

// All yields every key and its value, by partition in no set order. The
// body may delete keys (the one yielded or others); it must not put any.
func (km *KeyMap[V]) All() iter.Seq2[Key, V] {
	return func(yield func(Key, V) bool) {
		for _, o := range km.parts {
			if !o.all(func(off int64, v V) bool { return yield(Key{o.p.topic, o.p.part, off}, v) }) {
				return
			}
		}
	}
}

// partCounts counts something per partition (a session's records held,
// its acks pending), with no zero entries. Counts that move a record at
// a time find the partition changed last without hashing its topic's
// name, as KeyMap does. The zero partCounts is empty and ready to use.
type partCounts struct {
	m    map[tp]*partCount
	last *partCount // the entry found last; nil: none, or it was deleted
}

type partCount struct {
	p tp
	n int
}

func (c *partCounts) find(p tp) *partCount {
	if l := c.last; l != nil && l.p.part == p.part && l.p.topic == p.topic {
		return l
	}
	e := c.m[p]
	if e != nil {
		c.last = e
	}
	return e
}

// get returns p's count.
func (c *partCounts) get(p tp) int {
	if e := c.find(p); e != nil {
		return e.n
	}
	return 0
}

// add adds d to p's count, deleting it when it comes to 0, and returns
// the count.
func (c *partCounts) add(p tp, d int) int {
	e := c.find(p)
	if e == nil {
		if d == 0 {
			return 0
		}
		if c.m == nil {
			c.m = map[tp]*partCount{}
		}
		e = &partCount{p: p}
		c.m[p] = e
		c.last = e
	}
	if e.n += d; e.n == 0 {
		delete(c.m, p)
		if c.last == e {
			c.last = nil
		}
	}
	return e.n
}

// len is the number of partitions with a count.
func (c *partCounts) len() int { return len(c.m) }

// all yields the partitions with a count, and their counts, in no set
// order.
func (c *partCounts) all() iter.Seq2[tp, int] {
	return func(yield func(tp, int) bool) {
		for p, e := range c.m {
			if !yield(p, e.n) {
				return
			}
		}
	}
}
