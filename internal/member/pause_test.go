package member_test

import (
	"context"
	"testing"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// A paused topic is fetched no more, while the member keeps fetching its
// other topics; the records of it already held stay held (renewable and
// ackable, not released: the broker never hands them out again), and
// after the pause it is fetched again from where it was, each record on
// its first delivery.
func TestPausedTopicIsNotFetchedAndItsRecordsInHandStayHeld(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	paused, other, group := c.Topic(t, 1), c.Topic(t, 1), c.Group(t)
	produce(t, c, paused, 1, 3)
	r := start(t, c, group, []string{paused, other})
	r.m.Grant(3)
	inHand := r.deliveriesN(3)

	r.m.PauseTopics([]string{paused})
	produce(t, c, paused, 1, 3)
	produce(t, c, other, 1, 3)
	r.m.Grant(6)
	r.deliveriesN(6)
	// Three more fetches with credit to spare, each after the pause.
	fetches := r.m.Stats().Fetches
	r.waitFor("three more fetches", func() bool { return r.m.Stats().Fetches >= fetches+3 })
	r.mu.Lock()
	got := keys(r.deliveries)
	r.mu.Unlock()
	for _, k := range got[3:] {
		if k.Topic != other {
			t.Errorf("while %s was paused the member got %v: %v", paused, k, got)
		}
	}
	// A paused partition is not idle: the stall check looks at none.
	idle, err := r.m.Idle(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(idle) != 1 || idle[0].Topic != other {
		t.Errorf("idle partitions while %s is paused: %+v, want %s's only", paused, idle, other)
	}
	for _, d := range inHand {
		r.m.Renew(d.Key())
	}
	r.waitFor("3 renewals", func() bool { return len(r.renewals) >= 3 })
	r.mu.Lock()
	for _, rn := range r.renewals {
		if rn.Err != nil {
			t.Errorf("renewal of %v, held since before the pause: %v", rn.Key, rn.Err)
		}
	}
	r.mu.Unlock()

	r.m.PauseTopics(nil)
	all := r.deliveriesN(9)
	for _, d := range all[6:] {
		if d.Key().Topic != paused || d.Key().Offset < 3 || d.Count != 1 {
			t.Errorf("after the pause: %v delivery %d, want %s at offset 3 or more, delivery 1", d.Key(), d.Count, paused)
		}
	}
	for _, d := range all {
		r.m.Ack(d.Key(), member.Accept)
	}
	r.ackedN(9)
	waitLag(t, c, group, paused, 1)
	waitLag(t, c, group, other, 1)
	r.leave()
}
