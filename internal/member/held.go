package member

import (
	"fmt"
	"time"
)

// Ack operation codes on the wire, beside the AckType ones, plus "none".
const (
	opNone  int8 = -1
	opGap   int8 = 0
	opRenew int8 = 4
)

// held is one acquired offset: a delivery, or an offset the member acks
// itself (internal: a gap with no record). Owned by Run's goroutine, like
// the map that holds it ([Member].held, by Key): an entry lives from the
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

// requeue puts the request's ops back as pending.
func (m *Member) requeue(rq *request) {
	for p, offs := range rq.ops {
		for _, o := range offs {
			k := Key{p.topic, p.part, o}
			h := m.held[k]
			if h == nil {
				continue
			}
			if h.ackSent {
				h.ackSent = false
			} else {
				h.renews += h.renewing
				h.renewing = 0
			}
			rq.s.queue(k, h)
		}
	}
}

// lose drops every record held in s, reporting it lost and answering its
// queued ops.
func (m *Member) lose(s *session, cause error) {
	for k, h := range m.held {
		if h.broker != s.broker {
			continue
		}
		m.loseOne(k, h, cause)
	}
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

func (m *Member) drop(k Key, h *held) {
	delete(m.held, k)
	m.dec.letGo(h.batch, h.ack == int8(Accept) || h.ack == int8(Reject))
	h.batch = nil // a slab of held entries must not keep it
	if s := m.sessions[h.broker]; s != nil {
		s.unqueue(k)
		p := tp{k.Topic, k.Partition}
		if s.held[p]--; s.held[p] == 0 {
			delete(s.held, p)
			if m.meta.wantSet[p] != s.broker+1 && s.parts[p] {
				s.forgetDue = true // the next fetch may forget it now
			}
		}
	}
	m.count(h, -1)
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

// opsDone answers the ops rq carried for partition p.
func (m *Member) opsDone(rq *request, p tp, err error, lock time.Duration) {
	m.opsAnswered(rq, p, err, lock, false)
}

// opsAnswered answers the ops rq carried for partition p; final answers
// them even if they failed as a list (a close is never resent).
func (m *Member) opsAnswered(rq *request, p tp, err error, lock time.Duration, final bool) {
	offs := rq.ops[p]
	if len(offs) == 0 {
		return
	}
	if err != nil && len(offs) > 1 && !isLeaderErr(err) && !final {
		// All-or-nothing (fact 4): resend the list's ops half at a time
		// (split, takeOps) until the bad ones fail alone.
		var depth int8
		for _, o := range offs {
			if h := m.held[Key{p.topic, p.part, o}]; h != nil {
				depth = max(depth, h.split)
			}
		}
		depth = min(depth+1, maxSplit)
		for _, o := range offs {
			if h := m.held[Key{p.topic, p.part, o}]; h != nil {
				h.split = depth
			}
		}
		m.requeue(&request{s: rq.s, ops: map[tp][]int64{p: offs}})
		return
	}
	if err != nil && isLeaderErr(err) {
		m.refreshMetadata()
	}
	for _, o := range offs {
		k := Key{p.topic, p.part, o}
		h := m.held[k]
		if h == nil {
			continue
		}
		if h.ackSent {
			if !h.internal && !h.released {
				var aerr error
				if err != nil {
					aerr = fmt.Errorf("member: ack %v %v: %w", AckType(h.ack), k, err)
				}
				m.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: aerr})
			}
			m.drop(k, h)
			continue
		}
		n := h.renewing
		h.renewing = 0
		h.split = 0
		for range n {
			if err != nil {
				m.emitRenewal(Renewal{Key: k, Err: fmt.Errorf("member: renew %v: %w", k, err)})
			} else {
				if lock <= 0 {
					lock = h.d.Lock // a broker that does not report it
				}
				h.d.Deadline = rq.sent.Add(lock)
				h.d.Lock = lock
				m.emitRenewal(Renewal{Key: k, Deadline: h.d.Deadline})
			}
		}
		if err != nil && isLeaderErr(err) {
			m.loseOne(k, h, err)
		}
	}
}
