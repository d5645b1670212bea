package member

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Ack operation codes on the wire, beside the AckType ones, plus "none".
const (
	opNone  int8 = -1
	opGap   int8 = 0
	opRenew int8 = 4
)

// held is one acquired offset: a delivery, or an offset the member acks
// itself (internal: a gap with no record). Owned by Run's goroutine, like
// the map that holds it ([Member].held, a KeyMap): an entry lives from the
// fetch that acquired it until its terminal acknowledgement is answered
// or its lock is lost (drop).
//
// Its operations: at most one terminal acknowledgement (ack), queued,
// then sent (ackSent); and renewals, counted as asked (renews) and in
// flight (renewing). An entry with an operation not yet sent is in its
// session's pending set.
type held struct {
	d      Delivery // the newest delivery of the offset (Deadline moved by renewals)
	broker int32    // the broker whose share session acquired it: the only one that may ack it
	// internal: an offset with no record (a control record or a gap),
	// which the member acknowledges itself (opGap) and never reports.
	internal bool
	// released: the member queued a RELEASE itself, in the close of the
	// session (sendClose); its result is not reported.
	released bool
	ack      int8 // the terminal ack queued or sent (an AckType, or opGap); opNone: none yet
	ackSent  bool // the ack is in a request in flight
	// split: the partition's list of ops that held this one failed as a
	// whole (fact 4), one bad op failing the good ones with it; each
	// failure of a list deepens it by one. The offsets of the deepest
	// split are resent half at a time (takeOps), a binary search for the
	// bad ones: k bad ops in a list of n cost about k·log2(n) requests,
	// where one op per request cost n while the partition's new acks
	// waited behind them. 0: not in a failed list.
	split    int8
	queued   pendingOp // the op it waits for in its session's pending set; 0: not in it
	renews   int       // renewals asked and not yet sent
	renewing int       // renewals in the request in flight
	size     int64     // the delivery's bytes (recordBytes), counted in Member.bytes while no ack is queued
	// batch is the decoded batch its record came from, which the decoder
	// keeps while records of it are held (decode.go); nil: none.
	batch *decodedBatch
}

// maxSplit bounds held.split: a list of 4,096 ops halves to one in 12.
const maxSplit = 64

// acquire records the partition's acquired records as held and queues
// their deliveries; it returns the number of offsets acquired.
func (m *Member) acquire(rq *request, p tp, sp *kmsg.ShareFetchResponseTopicPartition, lock time.Duration) int {
	if len(sp.AcquiredRecords) == 0 {
		return 0
	}
	acquired := slices.Clone(sp.AcquiredRecords)
	slices.SortFunc(acquired, func(a, b kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	recs := m.dec.records(p, sp.Records, acquired)
	m.acquiredNow(rq.s, p, time.Now())
	n, total := 0, len(recs)
	// The new entries of held come from one slab per fetch rather than
	// one allocation each. A slab lives while any of its entries is
	// held: a long job keeps its fetch's entries (about 100 bytes each),
	// but no records of them, which an entry lets go of when its job
	// ends (ack) or it is dropped.
	var slab []held
	added := 0 // entries new to s.held[p], counted once after the loop
	deadline := rq.sent.Add(lock)
	s := rq.s
	for _, a := range acquired {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			f := recs[n]
			rec := f.rec
			n++
			k := Key{p.topic, p.part, o}
			h := m.held.Get(k)
			if h != nil && h.broker != s.broker {
				// Held in another session (a leader move): that one is gone.
				m.loseOne(k, h, errors.New("partition moved"))
				h = nil
			}
			if h == nil {
				if len(slab) == 0 {
					slab = make([]held, total-n+1)
				}
				h = &slab[0]
				slab = slab[1:]
				*h = held{ack: opNone, broker: s.broker}
				m.held.Put(k, h)
				added++
			} else {
				m.count(h, -1)
			}
			m.st.Fetched++
			if rec != nil && !h.internal && h.ack != opNone {
				// Its job ended, but its lock ran out before the ack
				// went (a failed list resent op by op, a session
				// reopened): the broker gave it again, to this session.
				// Acks are by offset, so the queued one answers for this
				// delivery too; delivering it would run the job again
				// only for its ack to be refused here (the record has
				// an ack queued).
				h.d.Count, h.d.Deadline, h.d.Lock = int32(a.DeliveryCount), deadline, lock
				m.count(h, 1)
				m.st.Reacquired++
				continue
			}
			h.d = Delivery{Record: rec, Count: int32(a.DeliveryCount), Deadline: deadline, Lock: lock}
			h.internal = false
			m.deliveredFrom(h, f.b)
			switch {
			case rec == nil:
				// An offset with no record (a control record or a gap).
				h.internal, h.ack, h.ackSent = true, opGap, false
				s.queue(k, h)
			default:
				// Even past the credit (a batch_optimized fetch gave
				// more than MaxRecords): a release would cost a
				// delivery, and archive a last one, so deliver it; the
				// credit goes below 0 (handleFetch).
				h.size = recordBytes(rec)
				m.count(h, 1)
				m.out.Deliveries = append(m.out.Deliveries, h.d)
			}
		}
	}
	if added > 0 {
		s.held.add(p, added)
	}
	return n
}

// deliveredFrom makes b (nil: none) the decoded batch of h's delivery.
func (m *Member) deliveredFrom(h *held, b *decodedBatch) {
	m.dec.hold(b)
	m.dec.letGo(h.batch, false)
	h.batch = b
}

// count adds d (1 or −1) for h to nHeld and nAcked, and its size to the
// bytes in hand while it has no ack: called with −1 before h's entry or
// its ack changes and with 1 after.
func (m *Member) count(h *held, d int) {
	if h.internal {
		return
	}
	m.nHeld += d
	if h.ack != opNone {
		m.nAcked += d
	} else {
		m.bytes += int64(d) * h.size
	}
}

func (m *Member) drop(k Key, h *held) {
	m.held.Delete(k)
	m.dec.letGo(h.batch, h.ack == int8(Accept) || h.ack == int8(Reject))
	h.batch, h.d.Record = nil, nil // a slab of held entries must not keep them
	if s := m.sessions[h.broker]; s != nil {
		s.unqueue(k, h)
		p := tp{k.Topic, k.Partition}
		if s.held.add(p, -1) == 0 {
			if m.meta.wantSet[p] != s.broker+1 && s.parts[p] {
				s.forgetDue = true // the next fetch may forget it now
			}
		}
	}
	m.count(h, -1)
}

func (m *Member) loseOne(k Key, h *held, cause error) {
	err := fmt.Errorf("%w: lock lost: %v", ErrNotHeld, cause)
	if !h.internal && !h.released {
		if h.ack != opNone {
			m.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: err})
		} else {
			m.emitLost(k)
		}
		for range h.renews + h.renewing {
			m.emitRenewal(Renewal{Key: k, Err: err})
		}
	}
	m.drop(k, h)
}

// lose drops every record held in s, reporting it lost and answering its
// queued ops.
func (m *Member) lose(s *session, cause error) {
	for k, h := range m.held.All() {
		if h.broker != s.broker {
			continue
		}
		m.loseOne(k, h, cause)
	}
}
