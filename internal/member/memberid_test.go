package member_test

import (
	"testing"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// Why a restarted worker does not take its old member ID back (docs/architecture.md,
// fact 21 would let it resume its partitions at once): two live members
// with one ID are one member to the coordinator (neither is fenced, both
// are assigned every partition), but each one's share fetches open the
// broker's share session of that ID afresh, so they reset each other's
// sessions for as long as both run (measured: 42 to 51 resets each in 6 s,
// and on Kafka about one ack in six failed). A restart that overlaps the
// old process (a rolling update, two replicas given one ID) would do this;
// RELIABILITY.md ("Failover after a crash") says so.
func TestOneMemberIDInTwoMembersResetsSessions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	produce(t, c, topic, 2, 2000)
	id := func(cfg *member.Config) { cfg.MemberID = "one-id-for-two-members" }
	a := start(t, c, group, []string{topic}, id)
	a.waitFor("the first member joined", func() bool { return a.m.Stats().State == member.Joined })
	b := start(t, c, group, []string{topic}, id)
	newAcker(a)
	newAcker(b)
	a.m.Grant(5)
	b.m.Grant(5)
	a.waitFor("both members resetting each other's share sessions", func() bool {
		return a.m.Stats().SessionsReset >= 3 && b.m.Stats().SessionsReset >= 3
	})
	sa, sb := a.m.Stats(), b.m.Stats()
	if sa.Rejoins != 0 || sb.Rejoins != 0 || sa.State != member.Joined || sb.State != member.Joined {
		t.Errorf("a %v (rejoins %d), b %v (rejoins %d): want both joined, never fenced", sa.State, sa.Rejoins, sb.State, sb.Rejoins)
	}
	t.Logf("%s: share sessions reset: %d and %d; ack errors %d and %d", c.Kind, sa.SessionsReset, sb.SessionsReset, sa.AckErrors, sb.AckErrors)
	a.stop()
	b.stop()
}
