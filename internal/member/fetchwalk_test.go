package member

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A fetch of an open session names only the partitions it adds, forgets
// or acknowledges (KIP-932), and walks the session's partitions only when
// they may differ. A session of 600 partitions opens with six fetches
// that add a hundred each (addPerFetch), the first five not waiting for
// records; then, in line with the plan, it
// sends a fetch that names none of them, or only the one it carries an
// acknowledgement for; a new plan, or the last record held of a partition
// no longer wanted, makes the next fetch add or forget what changed.
// Drives sendFetch directly and answers each fetch by hand.
func TestFetchNamesOnlyWhatChanged(t *testing.T) {
	m := directMember(t, 1)
	const parts = 600
	id := [16]byte{1}
	m.group.state = Joined
	m.meta.names[id], m.meta.ids["t"] = "t", id
	assign := func(n int32) {
		var ps []int32
		for p := range n {
			ps = append(ps, p)
			m.meta.leaders[tp{"t", p}] = 0
		}
		m.group.assigned = map[[16]byte][]int32{id: ps}
		m.replan()
	}
	assign(parts)
	s := m.session(0)
	// fetch sends s's next fetch, answers it with no records, and returns
	// the partitions it named and forgot.
	var maxWait int32
	fetch := func() (named, forgot []int32, acked int) {
		t.Helper()
		m.sendFetch(s, 10)
		res := <-m.results
		m.nIO--
		req := res.rq.req.(*kmsg.ShareFetchRequest)
		maxWait = req.MaxWaitMillis
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				named = append(named, rp.Partition)
				acked += len(rp.AcknowledgementBatches)
			}
		}
		for _, f := range req.ForgottenTopicsData {
			forgot = append(forgot, f.Partitions...)
		}
		m.handleSession(res.rq, &kmsg.ShareFetchResponse{}, nil)
		return named, forgot, acked
	}

	seen := map[int32]bool{}
	for i := range parts / addPerFetch {
		named, _, _ := fetch()
		if len(named) != addPerFetch {
			t.Fatalf("opening fetch %d named %d partitions, want %d", i+1, len(named), addPerFetch)
		}
		for _, p := range named {
			if seen[p] {
				t.Fatalf("opening fetch %d named partition %d again", i+1, p)
			}
			seen[p] = true
		}
		if last := i == parts/addPerFetch-1; (maxWait == 0) == last {
			t.Errorf("opening fetch %d waits up to %d ms; want 0 while partitions remain to add, the member's MaxWait at the last", i+1, maxWait)
		}
	}
	if named, forgot, _ := fetch(); len(named) != 0 || len(forgot) != 0 {
		t.Errorf("a fetch in line with the plan named %v and forgot %v, want none", named, forgot)
	}

	// A record of partition 7 held and accepted: the fetch names 7 alone.
	k := Key{"t", 7, 42}
	m.held.Put(k, &held{ack: opNone, broker: 0})
	s.held.add(tp{"t", 7}, 1)
	m.nHeld++
	m.mbox.acks, m.mbox.anything = append(m.mbox.acks, pendingAck{k, Accept}), true
	m.mailbox()
	if named, forgot, acked := fetch(); len(named) != 1 || named[0] != 7 || acked != 1 || len(forgot) != 0 {
		t.Errorf("the fetch carrying an ack named %v (%d ack batches) and forgot %v, want [7] with 1 and none", named, acked, forgot)
	}
	m.out = Event{} // the ack's result, not read here

	// Partition 599 no longer assigned while a record of it is held: not
	// forgotten until that record is dropped.
	k = Key{"t", parts - 1, 1}
	m.held.Put(k, &held{ack: opNone, broker: 0})
	s.held.add(tp{"t", parts - 1}, 1)
	m.nHeld++
	assign(parts - 1)
	if named, forgot, _ := fetch(); len(named) != 0 || len(forgot) != 0 {
		t.Errorf("after the new plan the fetch named %v and forgot %v, want none (599 still held)", named, forgot)
	}
	if named, forgot, _ := fetch(); len(named) != 0 || len(forgot) != 0 {
		t.Errorf("the next fetch named %v and forgot %v, want none", named, forgot)
	}
	m.drop(k, m.held.Get(k))
	if named, forgot, _ := fetch(); len(named) != 0 || len(forgot) != 1 || forgot[0] != parts-1 {
		t.Errorf("once 599's record was dropped the fetch named %v and forgot %v, want [599] forgotten", named, forgot)
	}
	if _, forgot, _ := fetch(); len(forgot) != 0 {
		t.Errorf("the fetch after forgot %v again", forgot)
	}

	// A new partition assigned: the next fetch adds it alone.
	assign(parts)
	if named, _, _ := fetch(); len(named) != 1 || named[0] != parts-1 {
		t.Errorf("after 599 was assigned again the fetch named %v, want [599]", named)
	}
}
