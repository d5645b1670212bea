package member

import (
	"fmt"
	"time"
)

// held is one acquired offset: a delivery, or an offset the member acks
// itself (internal: a gap with no record).
type held struct {
	d        Delivery
	broker   int32
	internal bool
	released bool // a RELEASE the member sends itself on close: no result
	ack      int8 // terminal ack queued or sent, opNone if none
	ackSent  bool
	solo     bool
	renews   int // renewals asked and not yet sent
	renewing int // renewals in flight
}

// requeue puts the request's ops back as pending.
func (r *runner) requeue(rq *request) {
	for p, offs := range rq.ops {
		for _, o := range offs {
			k := Key{p.topic, p.part, o}
			h := r.held[k]
			if h == nil {
				continue
			}
			if h.ackSent {
				h.ackSent = false
			} else {
				h.renews += h.renewing
				h.renewing = 0
			}
			rq.s.pending[k] = true
		}
	}
}

// lose drops every record held in s, reporting it lost and answering its
// queued ops.
func (r *runner) lose(s *session, cause error) {
	for k, h := range r.held {
		if h.broker != s.broker {
			continue
		}
		r.loseOne(k, h, cause)
	}
}

func (r *runner) loseOne(k Key, h *held, cause error) {
	err := fmt.Errorf("%w: lock lost: %v", ErrNotHeld, cause)
	if !h.internal && !h.released {
		if h.ack != opNone {
			r.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: err})
		} else {
			r.emitLost(k)
		}
		for range h.renews + h.renewing {
			r.emitRenewal(Renewal{Key: k, Err: err})
		}
	}
	r.drop(k, h)
}

func (r *runner) drop(k Key, h *held) {
	delete(r.held, k)
	if s := r.sessions[h.broker]; s != nil {
		delete(s.pending, k)
	}
	if !h.internal {
		r.nHeld--
	}
}

// opsDone answers the ops rq carried for partition p.
func (r *runner) opsDone(rq *request, p tp, err error, lock time.Duration) {
	r.opsAnswered(rq, p, err, lock, false)
}

// opsAnswered answers the ops rq carried for partition p; final answers
// them even if they failed as a list (a close is never resent).
func (r *runner) opsAnswered(rq *request, p tp, err error, lock time.Duration, final bool) {
	offs := rq.ops[p]
	if len(offs) == 0 {
		return
	}
	if err != nil && len(offs) > 1 && !isLeaderErr(err) && !final {
		// All-or-nothing (fact 4): resend each op of the partition alone.
		for _, o := range offs {
			if h := r.held[Key{p.topic, p.part, o}]; h != nil {
				h.solo = true
			}
		}
		r.requeue(&request{s: rq.s, ops: map[tp][]int64{p: offs}})
		return
	}
	if err != nil && isLeaderErr(err) {
		r.refreshMetadata()
	}
	for _, o := range offs {
		k := Key{p.topic, p.part, o}
		h := r.held[k]
		if h == nil {
			continue
		}
		if h.ackSent {
			if !h.internal && !h.released {
				var aerr error
				if err != nil {
					aerr = fmt.Errorf("member: ack %v %v: %w", AckType(h.ack), k, err)
				}
				r.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: aerr})
			}
			r.drop(k, h)
			continue
		}
		n := h.renewing
		h.renewing = 0
		h.solo = false
		for range n {
			if err != nil {
				r.emitRenewal(Renewal{Key: k, Err: fmt.Errorf("member: renew %v: %w", k, err)})
			} else {
				if lock <= 0 {
					lock = h.d.Lock // a broker that does not report it
				}
				h.d.Deadline = rq.sent.Add(lock)
				h.d.Lock = lock
				r.emitRenewal(Renewal{Key: k, Deadline: h.d.Deadline})
			}
		}
		if err != nil && isLeaderErr(err) {
			r.loseOne(k, h, err)
		}
	}
}
