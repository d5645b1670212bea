package member

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A partition's list of acks that fails as a whole (fact 4) is resent
// half at a time: the good halves apply, a failing half is halved again,
// and a bad ack alone fails alone. Drives takeOps and opsAnswered
// directly: the broker's answers are given by hand.
func TestFailedAckListIsResentHalfAtATime(t *testing.T) {
	m := directMember(t, 1)
	p := tp{"t", 0}
	s := m.session(0)
	s.epoch = 1
	const n = 8
	bad := map[int64]bool{5: true}
	for o := range int64(n) {
		k := Key{"t", 0, o}
		h := &held{ack: int8(Accept), broker: 0}
		m.held.Put(k, h)
		s.held.add(p, 1)
		m.count(h, 1)
		s.queue(k, h)
	}
	var sent [][]int64
	acked := map[int64]error{}
	// answer plays the broker: a list with a bad offset fails as a whole.
	answer := func() {
		t.Helper()
		ops := m.takeOps(s, false, false)
		offs := ops[p]
		if len(offs) == 0 {
			t.Fatalf("nothing taken; %d pending", s.pending.Len())
		}
		sent = append(sent, offs)
		var perr error
		if slices.ContainsFunc(offs, func(o int64) bool { return bad[o] }) {
			perr = kerr.InvalidRecordState
		}
		m.opsAnswered(&request{s: s, ops: ops, sent: time.Now()}, p, perr, time.Second, false)
		for _, a := range m.out.Acked {
			acked[a.Key.Offset] = a.Err
		}
		m.out = Event{}
	}
	for m.held.Len() > 0 && len(sent) < 2*n {
		answer()
	}
	want := "[[0 1 2 3 4 5 6 7] [0 1 2 3] [4 5] [4] [5] [6] [7]]"
	if got := fmt.Sprint(sent); got != want {
		t.Errorf("lists sent %s, want %s", got, want)
	}
	for o := range int64(n) {
		err, ok := acked[o]
		switch {
		case !ok:
			t.Errorf("offset %d: no answer", o)
		case bad[o] && !errors.Is(err, kerr.InvalidRecordState):
			t.Errorf("offset %d (bad): answer %v, want INVALID_RECORD_STATE", o, err)
		case !bad[o] && err != nil:
			t.Errorf("offset %d: answer %v, want applied", o, err)
		}
	}
	if m.held.Len() != 0 || s.pending.Len() != 0 || m.nHeld != 0 || m.nAcked != 0 {
		t.Errorf("%d held, %d pending, nHeld %d, nAcked %d at the end", m.held.Len(), s.pending.Len(), m.nHeld, m.nAcked)
	}
}
