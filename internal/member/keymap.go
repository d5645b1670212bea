package member

import "iter"

// KeyMap maps record keys to values, by partition and then by offset. A
// map keyed by the whole [Key] hashes and compares the topic's name at
// every lookup; here a lookup hashes the offset as an integer, and finds
// the partition by its name only when it is not the one of the last
// lookup. Runs of keys of one partition are the common case: a fetch
// acquires records partition by partition, a request acknowledges them
// per partition, and jobs end in about the order they were fetched. At
// short jobs, map work keyed by Key was the largest part of the member's
// and the executor's own CPU per job.
//
// The zero KeyMap is empty and ready to use. A KeyMap keeps a partition's
// (empty) table once it held a key of it, so that a partition whose
// records come and go does not make a table each time; tables are as many
// as the partitions ever held. It is not safe for concurrent use.
type KeyMap[V any] struct {
	parts map[tp]*offsets[V]
	last  *offsets[V] // the partition of the last lookup; nil: none yet
	n     int
}

// offsets is one partition's table of a KeyMap.
type offsets[V any] struct {
	p tp
	m map[int64]V
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
		o = &offsets[V]{p: p, m: map[int64]V{}}
		km.parts[p] = o
	}
	km.last = o
	return o
}

// Get returns k's value; the zero V if k is not in the map.
func (km *KeyMap[V]) Get(k Key) V {
	if o := km.part(k.Topic, k.Partition, false); o != nil {
		return o.m[k.Offset]
	}
	var zero V
	return zero
}

// Put sets k's value.
func (km *KeyMap[V]) Put(k Key, v V) {
	m := km.part(k.Topic, k.Partition, true).m
	n := len(m)
	m[k.Offset] = v
	km.n += len(m) - n
}

// Delete removes k, if it is there.
func (km *KeyMap[V]) Delete(k Key) {
	o := km.part(k.Topic, k.Partition, false)
	if o == nil {
		return
	}
	n := len(o.m)
	delete(o.m, k.Offset)
	km.n -= n - len(o.m)
}

// clearPart removes every key of the partition whose table is o.
func (km *KeyMap[V]) clearPart(o *offsets[V]) {
	km.n -= len(o.m)
	clear(o.m)
}

// Len is the number of keys in the map.
func (km *KeyMap[V]) Len() int { return km.n }

// All yields every key and its value, in no set order. The body may
// delete keys (the one yielded or others) and put keys back, with the
// same guarantees as a range over a Go map.
func (km *KeyMap[V]) All() iter.Seq2[Key, V] {
	return func(yield func(Key, V) bool) {
		for _, o := range km.parts {
			for off, v := range o.m {
				if !yield(Key{o.p.topic, o.p.part, off}, v) {
					return
				}
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
