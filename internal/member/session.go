package member

import "time"

// session is the member's share session with one broker: the one that
// leads some assigned partitions, or that acquired records the member
// still holds. At most one request of a session is in flight. Owned by
// Run's goroutine.
type session struct {
	broker int32
	// epoch is the share session epoch of the next request: 0 opens the
	// session (again), each answered request adds one, −1 closes it.
	epoch int32
	// parts are the partitions in the broker's view of the session: the
	// ones answered fetches named. A fetch names the wanted ones not in
	// it yet, and forgets those no longer wanted once the member holds
	// none of their records here, or at once if their topic is paused
	// (forgettable).
	parts map[tp]bool
	// syncedPlan is the plan (routing.plan) that parts was last brought
	// in line with: every wanted partition in it, every other one
	// forgotten unless records of it are held here. 0: never. While it
	// is the current plan and forgetDue is false, a fetch names only the
	// partitions it acknowledges, without a walk of the wanted ones and
	// of parts (KIP-932: a fetch with epoch > 0 lists only partitions to
	// add, forget or acknowledge), so its cost does not grow with the
	// session's partitions.
	syncedPlan uint64
	// forgetDue: the last record held here of a partition no longer
	// wanted was dropped (drop), so the next fetch may forget it.
	forgetDue bool
	// modePlan and modeDecoded are the plan and the decoder's batch-size
	// changes (decoder.changes) that maxBatch was computed for (0: never):
	// the largest batch seen of the wanted partitions, −1 if one is not
	// seen yet (acquireMode).
	modePlan, modeDecoded uint64
	maxBatch              int
	// pending holds the keys held here with an op not yet sent: a
	// terminal ack (opAck), or only renewals (opRenewal), as the entry's
	// queued says. It maps to the entry itself so that a request takes
	// its ops without a lookup in Member.held per key (takeOps). Changed
	// only through queue, unqueue and takeOps, which keep the counts
	// beside it, so that turn, which runs at every step, reads them
	// without a scan of the set (it holds up to the credit: thousands of
	// keys).
	pending  KeyMap[*held]
	nRenewal int        // keys in pending for renewals only
	acksIn   partCounts // keys in pending with a terminal ack, per partition (no zero entries)
	// held counts the records acquired in this session and held, per
	// partition (no zero entries): a fetch forgets a partition no longer
	// wanted only once none is held (sendFetch), and a session reset to
	// epoch 0 that holds some is reopened (turn), so the stop can close it.
	held    partCounts
	busy    bool      // a request is in flight
	closed  bool      // the epoch −1 close was sent: the session sends nothing more
	backoff time.Time // after a failure, no request before then
	errs    int       // requests failed in a row, for the backoff
	// empty counts the session's fetches that asked for records and
	// acquired none (of any partition, with no partition error): the
	// broker had nothing to give (idle.go).
	empty int64
	// drained: the session's last fetch acquired nothing, so the next
	// one will likely wait out MaxWait: acks go alone rather than wait
	// on it.
	drained bool
	// holdUntil: the session waits for more credit (or a fetch to carry
	// its acks) until then; see coalesce. Zero: not holding.
	holdUntil time.Time
}

// pendingOp is what a key in a session's pending set waits to send.
type pendingOp int8

const (
	opRenewal pendingOp = iota + 1 // renewals only (no terminal ack queued)
	opAck                          // a terminal ack (or the member's own GAP)
)

// queue puts k in the pending set of its session s, or moves it to the
// op h now waits for; a key with nothing to send leaves the set.
func (s *session) queue(k Key, h *held) {
	var op pendingOp
	switch {
	case h.ack != opNone:
		op = opAck
	case h.renews > 0:
		op = opRenewal
	default:
		s.unqueue(k, h)
		return
	}
	if h.queued == op {
		return
	}
	s.unqueue(k, h) // from the op it waited for, if any
	s.pending.Put(k, h)
	h.queued = op
	if op == opAck {
		s.acksIn.add(tp{k.Topic, k.Partition}, 1)
	} else {
		s.nRenewal++
	}
}

// unqueue takes k, whose entry is h, out of the session's pending set, if
// it is there: the set holds a key exactly while its entry's queued is set
// (queue, unqueue and takeOps keep both), so a key not queued costs no
// lookup.
func (s *session) unqueue(k Key, h *held) {
	if h.queued == 0 {
		return
	}
	s.pending.Delete(k)
	op := h.queued
	h.queued = 0
	if op == opRenewal {
		s.nRenewal--
		return
	}
	p := tp{k.Topic, k.Partition}
	s.acksIn.add(p, -1)
}
