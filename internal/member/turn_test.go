package member

import (
	"testing"
)

// The coalescing hold counts the jobs in hand across sessions: a session
// with nothing pending whose neighbour has every held record's ack queued
// fetches at once, for no job in hand will free credit. Drives turn
// directly: which sessions are busy, and what each holds, is set by hand.
func TestTurnCountsJobsInHandAcrossSessions(t *testing.T) {
	m := directMember(t, 2)
	p0, p1 := tp{"t", 0}, tp{"t", 1}
	m.group.state = Joined
	m.meta.ids["t"] = [16]byte{1}
	m.meta.want = map[int32][]tp{0: {p0}, 1: {p1}}
	m.meta.wantSet = map[tp]int32{p0: 1, p1: 2}
	a, b := m.session(0), m.session(1)
	a.epoch, b.epoch = 1, 1
	a.parts[p0], b.parts[p1] = true, true
	// Session b holds 1,000 records whose jobs all ended: their accepts
	// are queued behind b's request in flight, and their credit is back.
	const n = 1000
	for o := range int64(n) {
		k := Key{"t", 1, o}
		m.held.Put(k, &held{ack: opNone, broker: 1})
		b.held.add(p1, 1)
		m.nHeld++
		m.mbox.acks = append(m.mbox.acks, pendingAck{k, Accept})
	}
	m.mbox.grant, m.mbox.anything = 100, true
	m.mailbox()
	b.busy = true
	if b.pending.Len() != n || m.credit != 100 {
		t.Fatalf("set-up: %d pending in b, credit %d", b.pending.Len(), m.credit)
	}

	m.turn(a, 2)
	if !a.busy {
		t.Errorf("session a held its fetch of %d back (until %v) with no job in hand", m.share(a, 2), a.holdUntil)
		return
	}
	if res := <-m.results; res.rq.s != a || res.rq.kind != kindFetch {
		t.Errorf("result %+v, want a's fetch", res)
	}
}
