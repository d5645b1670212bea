package member_test

import (
	"errors"
	"testing"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	cl := c.Client(t)
	for _, tc := range []struct {
		name string
		cfg  member.Config
	}{
		{"no client", member.Config{Group: "g", Topics: []string{"t"}}},
		{"no group", member.Config{Client: cl, Topics: []string{"t"}}},
		{"no topics", member.Config{Client: cl, Group: "g"}},
		{"empty topic", member.Config{Client: cl, Group: "g", Topics: []string{""}}},
		{"negative MaxWait", member.Config{Client: cl, Group: "g", Topics: []string{"t"}, MaxWait: -1}},
		{"negative AssignmentPoll", member.Config{Client: cl, Group: "g", Topics: []string{"t"}, AssignmentPoll: -1}},
	} {
		if _, err := member.New(tc.cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	m, err := member.New(member.Config{Client: cl, Group: "g", Topics: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Stats(); s.MemberID == "" || s.State != member.Joining {
		t.Errorf("fresh member stats %+v: want a member id, state joining", s)
	}
}

// Granting credit delivers exactly the records produced, never more than
// granted, and accepting every one leaves lag 0.
func TestGrantDeliversExactlyTheRecordsAndAcksClearLag(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 3), c.Group(t)
	const n = 30
	produce(t, c, topic, 3, n)
	r := start(t, c, group, []string{topic})

	r.m.Grant(10)
	first := r.deliveriesN(10)
	r.waitFor("credit used up", func() bool { s := r.m.Stats(); return s.Credit == 0 && s.Held == 10 })
	if len(first) != 10 {
		t.Fatalf("granted 10, got %d deliveries: %v", len(first), keys(first))
	}
	fetches := r.m.Stats().Fetches
	for _, d := range first {
		if d.Count != 1 || d.Record == nil || d.Deadline.IsZero() || d.Lock <= 0 {
			t.Errorf("delivery %v: count %d, deadline %v, lock %v", d.Key(), d.Count, d.Deadline, d.Lock)
		}
		r.m.Ack(d.Key(), member.Accept)
	}
	r.ackedN(10)
	// With no credit the acks went alone: no ShareFetch was sent.
	if s := r.m.Stats(); s.Fetches != fetches || s.Acks[member.Accept] != 10 || s.Held != 0 {
		t.Errorf("stats %+v after acking with no credit: want %d fetches, 10 accepts, none held", s, fetches)
	}
	r.m.Grant(n - 10)
	all := r.deliveriesN(n)
	for _, d := range all[10:] {
		r.m.Ack(d.Key(), member.Accept)
	}
	r.ackedN(n)
	seen := map[string]bool{}
	for _, d := range all {
		if seen[string(d.Record.Value)] {
			t.Errorf("%v delivered twice", d.Key())
		}
		seen[string(d.Record.Value)] = true
	}
	if len(all) != n || len(seen) != n {
		t.Fatalf("got %d deliveries of %d values, want %d", len(all), len(seen), n)
	}
	waitLag(t, c, group, topic, 3)
	s := r.m.Stats()
	if s.State != member.Joined || s.Partitions != 3 || s.Held != 0 || s.Credit != 0 ||
		s.Fetched != n || s.Acks[member.Accept] != n || s.SessionsOpened != 1 || s.AckErrors != 0 {
		t.Errorf("stats %+v", s)
	}
	r.leave()
}

// Acks for records not held answer ErrNotHeld: never delivered, and acked
// twice.
func TestAckOfRecordNotHeld(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 1)
	r := start(t, c, group, []string{topic})
	r.m.Grant(1)
	d := r.deliveriesN(1)[0]
	r.m.Ack(member.Key{Topic: topic, Partition: 0, Offset: 99}, member.Accept)
	r.m.Ack(d.Key(), member.Accept)
	r.m.Ack(d.Key(), member.Reject)
	r.m.Renew(d.Key())
	r.waitFor("3 acks, 1 renewal", func() bool { return len(r.acked) == 3 && len(r.renewals) == 1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	var ok, notHeld int
	for _, a := range r.acked {
		switch {
		case a.Err == nil && a.Key == d.Key() && a.Type == member.Accept:
			ok++
		case errors.Is(a.Err, member.ErrNotHeld):
			notHeld++
		}
	}
	if ok != 1 || notHeld != 2 || !errors.Is(r.renewals[0].Err, member.ErrNotHeld) {
		t.Errorf("acked %v, renewals %v: want one accept and ErrNotHeld for the rest", r.acked, r.renewals)
	}
}
