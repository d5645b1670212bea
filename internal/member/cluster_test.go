package member_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// acker acks every delivery at once and grants one credit back per
// delivery, as an executor of no-op jobs does; it tracks which records
// (by value) were accepted.
type acker struct {
	r *run

	mu       sync.Mutex
	values   map[member.Key]string
	accepted map[string]bool
}

func newAcker(r *run) *acker {
	a := &acker{r: r, values: map[member.Key]string{}, accepted: map[string]bool{}}
	r.mu.Lock()
	r.onDelivery = func(d member.Delivery) {
		a.mu.Lock()
		a.values[d.Key()] = string(d.Record.Value)
		a.mu.Unlock()
		r.m.Ack(d.Key(), member.Accept)
		r.m.Grant(1)
	}
	r.mu.Unlock()
	return a
}

// acceptedN waits until n distinct records were accepted.
func (a *acker) acceptedN(n int) {
	a.r.t.Helper()
	a.r.waitFor("accepted records", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, ar := range a.r.acked {
			if ar.Err == nil {
				a.accepted[a.values[ar.Key]] = true
			}
		}
		return len(a.accepted) >= n
	})
}

// Partitions led by different brokers: one session per broker, every
// record delivered and accepted; on kfake leaders then move mid-run and
// nothing is lost.
func TestPartitionsOnSeveralBrokers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t, kafkatest.Brokers(3))
	const partitions, n = 6, 600
	topic, group := c.Topic(t, partitions), c.Group(t)
	produce(t, c, topic, partitions, n/2)
	r := start(t, c, group, []string{topic})
	a := newAcker(r)
	r.m.Grant(20)
	a.acceptedN(n / 4)
	if f := c.Fake(); f != nil {
		leaders := map[int32]bool{}
		for p := range int32(partitions) {
			leaders[f.LeaderFor(topic, p)] = true
		}
		if len(leaders) < 2 {
			t.Fatalf("%d brokers lead the partitions, want several", len(leaders))
		}
		// A session opens when its broker's share of the credit is free:
		// under load the first sessions may hold all of it for a while.
		r.waitFor(fmt.Sprintf("a session with each of the %d leaders", len(leaders)), func() bool {
			return r.m.Stats().SessionsOpened >= int64(len(leaders))
		})
		for p := range int32(partitions) {
			to := (f.LeaderFor(topic, p) + 1) % 3
			if err := f.MoveTopicPartition(topic, p, to); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(t, c, topic, partitions, n/2)
	a.acceptedN(n)
	waitLag(t, c, group, topic, partitions)
	r.leave()
	t.Logf("%s: stats %+v", c.Kind, r.m.Stats())
}

// delivering starts a member of a new group on a new topic of two
// partitions with ten records each, acking every delivery, and returns
// once it accepted five.
func delivering(t *testing.T, c *kafkatest.Cluster) (topic, group string, r *run, a *acker) {
	t.Helper()
	topic, group = c.Topic(t, 2), c.Group(t)
	produce(t, c, topic, 2, 10)
	r = start(t, c, group, []string{topic})
	a = newAcker(r)
	r.m.Grant(2)
	a.acceptedN(5)
	return topic, group, r, a
}

// A member the coordinator fences rejoins with epoch 0 and the same id
// and goes on delivering (kfake: its heartbeat is answered
// UNKNOWN_MEMBER_ID once; Kafka cannot be made to fence on cue).
func TestFencedMemberRejoins(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	f := c.Fake()
	if f == nil {
		t.Log("kafka: fencing cannot be provoked; the test checks only delivery")
	}
	topic, group, r, a := delivering(t, c)
	beat, fences := r.m.Standing()
	if beat.IsZero() || time.Since(beat) > time.Minute || fences != 0 {
		t.Errorf("Standing %v, %d after the join: want a heartbeat answered lately, no fencing", beat, fences)
	}
	if f != nil {
		f.ControlKey(int16(kmsg.ShareGroupHeartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
			hb := req.(*kmsg.ShareGroupHeartbeatRequest)
			if hb.MemberEpoch <= 0 {
				f.KeepControl()
				return nil, nil, false
			}
			resp := hb.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
			resp.ErrorCode = kerr.UnknownMemberID.Code
			return resp, nil, true
		})
		r.waitFor("a rejoin", func() bool { return r.m.Stats().Rejoins == 1 })
		if _, fences := r.m.Standing(); fences != 1 {
			t.Errorf("Standing: %d fencings after one, want 1", fences)
		}
	}
	produce(t, c, topic, 2, 10)
	a.acceptedN(20)
	waitLag(t, c, group, topic, 2)
	if s := r.m.Stats(); s.State != member.Joined {
		t.Errorf("stats %+v: want joined", s)
	}
	r.leave()
}

// A heartbeat answered NOT_COORDINATOR (the coordinator moved: a broker
// restarted) has the member look the coordinator up again
// (findCoordinator), and it goes on heartbeating and delivering without
// a rejoin. kfake: the old coordinator's NOT_COORDINATOR is played by a
// control function on one heartbeat; worker's
// TestWorkerFollowsAMovedCoordinator moves it on a real 3-node cluster.
func TestMemberFindsAMovedCoordinator(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	f := c.Fake()
	if f == nil {
		t.Skip("kafka: the coordinator cannot be moved on cue here (worker's TestWorkerFollowsAMovedCoordinator moves it on a 3-node cluster)")
	}
	topic, _, r, a := delivering(t, c)

	var stale, findsAfter atomic.Int32
	f.ControlKey(int16(kmsg.FindCoordinator), func(kmsg.Request) (kmsg.Response, error, bool) {
		f.KeepControl()
		if stale.Load() > 0 {
			findsAfter.Add(1)
		}
		return nil, nil, false
	})
	f.ControlKey(int16(kmsg.ShareGroupHeartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.ShareGroupHeartbeatRequest).MemberEpoch <= 0 {
			f.KeepControl()
			return nil, nil, false
		}
		stale.Add(1)
		resp := req.ResponseKind().(*kmsg.ShareGroupHeartbeatResponse)
		resp.ErrorCode = kerr.NotCoordinator.Code
		return resp, nil, true // once
	})
	r.waitFor("the stale answer", func() bool { return stale.Load() == 1 })
	r.waitFor("the coordinator looked up again", func() bool { return findsAfter.Load() > 0 })
	after := time.Now()
	r.waitFor("a heartbeat answered", func() bool {
		beat, _ := r.m.Standing()
		return beat.After(after)
	})
	produce(t, c, topic, 2, 10)
	a.acceptedN(20)
	if s := r.m.Stats(); s.State != member.Joined || s.Rejoins != 0 {
		t.Errorf("stats %+v: want joined, no rejoin", s)
	}
	r.leave()
}

// A session whose epoch the broker rejects is reopened with epoch 0, its
// records stay held and the failed acks are sent again (facts 8, 9;
// kfake: one ShareAcknowledge is answered INVALID_SHARE_SESSION_EPOCH).
func TestInvalidSessionEpochReopensAndResendsAcks(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 3)
	r := start(t, c, group, []string{topic})
	r.m.Grant(3)
	ds := r.deliveriesN(3)
	if f := c.Fake(); f != nil {
		f.ControlKey(int16(kmsg.ShareAcknowledge), func(req kmsg.Request) (kmsg.Response, error, bool) {
			resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
			resp.ErrorCode = kerr.InvalidShareSessionEpoch.Code
			return resp, nil, true
		})
	}
	for _, d := range ds {
		r.m.Ack(d.Key(), member.Accept)
	}
	r.ackedN(3)
	waitLag(t, c, group, topic, 1)
	if s := r.m.Stats(); c.Fake() != nil && (s.SessionsReset != 1 || s.SessionsOpened != 2) {
		t.Errorf("stats %+v: want one reset, two sessions opened", s)
	}
}

// resetWhileDraining starts a member of group on a fresh one-partition
// topic of c holding 3 records, and has kfake answer its next ShareFetch
// INVALID_SHARE_SESSION_EPOCH once the member has taken StopFetching: the
// session is reset to epoch 0 with records held and nothing to send.
// thenFetch, when set, runs while that fetch waits in kfake, to control
// the fetches after it. It returns the member, the topic and the 3
// deliveries.
func resetWhileDraining(t *testing.T, c *kafkatest.Cluster, f *kfake.Cluster, group string, thenFetch func()) (*run, string, []member.Delivery) {
	t.Helper()
	topic := c.Topic(t, 1)
	produce(t, c, topic, 1, 3)
	r := start(t, c, group, []string{topic})
	r.m.Grant(3)
	ds := r.deliveriesN(3)

	// The next fetch waits in kfake until the member has taken
	// StopFetching, then fails with the session's epoch.
	entered, release := make(chan struct{}), make(chan struct{})
	f.ControlKey(int16(kmsg.ShareFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		close(entered)
		<-release
		resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
		resp.ErrorCode = kerr.InvalidShareSessionEpoch.Code
		return resp, nil, true
	})
	r.m.Grant(1)
	<-entered
	if thenFetch != nil {
		thenFetch()
	}
	r.m.StopFetching()
	r.m.Grant(5) // taken with StopFetching or after it: the sign it was taken
	r.waitFor("StopFetching taken", func() bool { return r.m.Stats().Credit == 6 })
	close(release)
	return r, topic, ds
}

// A session reset to epoch 0 while the member drains, with records held
// and nothing to send, is opened again so that Leave can close it and
// release them (on Kafka only the close does, fact 12). kfake: the
// fetch in flight at StopFetching is answered INVALID_SHARE_SESSION_EPOCH.
func TestSessionResetWhileDrainingIsClosedAtLeave(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	f := c.Fake()
	if f == nil {
		t.Skip("needs kfake to answer a fetch INVALID_SHARE_SESSION_EPOCH")
	}
	group := c.Group(t)
	r, topic, ds := resetWhileDraining(t, c, f, group, nil)
	<-r.m.Quiet()
	r.leave()
	s := r.m.Stats()
	if s.SessionsReset != 1 || s.Held != 0 {
		t.Errorf("stats %+v: want one reset and nothing held after Leave", s)
	}
	o := newOther(t, c, group, topic)
	got := o.takeUntil("the 3 released records", func(rs []*kgo.Record) bool { return len(rs) >= 3 })
	for _, rec := range got {
		if rec.DeliveryCount() != 2 {
			t.Errorf("other member got %v, want %v with count 2", recKeys(got), keys(ds))
		}
	}
}

// A hard stop while a session reset to epoch 0 holds records and cannot
// be opened again counts them lost: no close can release them (the
// connection's end or their locks will). kfake: the fetch in flight at
// StopFetching is answered INVALID_SHARE_SESSION_EPOCH, every reopen
// UNKNOWN_SERVER_ERROR.
func TestSessionNotReopenedIsLostAtHardStop(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	f := c.Fake()
	if f == nil {
		t.Skip("needs kfake to fail the session's requests")
	}
	r, _, ds := resetWhileDraining(t, c, f, c.Group(t), func() {
		f.ControlKey(int16(kmsg.ShareFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			f.KeepControl()
			resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
			resp.ErrorCode = kerr.UnknownServerError.Code
			return resp, nil, true
		})
	})
	r.waitFor("a failed reopen", func() bool { return r.m.Stats().SessionsReset == 1 && r.m.Stats().SessionsOpened == 1 })
	r.stop()
	if err := <-r.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after its context ended: %v, want context.Canceled", err)
	}
	r.done <- nil
	// A hard stop sends no more events: the loss shows in the stats.
	if s := r.m.Stats(); s.Held != 0 || s.LostRecords != 3 {
		t.Errorf("stats %+v: want the 3 held records %v lost", s, keys(ds))
	}
}

// A hard stop (Run's context ends) closes the session, which releases
// the held records: another member gets them with count 2.
func TestHardStopReleasesHeldRecords(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 2)
	r := start(t, c, group, []string{topic})
	r.m.Grant(2)
	r.deliveriesN(2)
	r.stop()
	if err := <-r.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after its context ended: %v, want context.Canceled", err)
	}
	r.done <- nil
	o := newOther(t, c, group, topic)
	got := o.takeUntil("2 released records", func(rs []*kgo.Record) bool { return len(rs) >= 2 })
	for _, rec := range got {
		if rec.DeliveryCount() != 2 {
			t.Errorf("other member got %v, want count 2", recKeys(got))
		}
	}
}

// When a second member joins, the first stops fetching the partitions it
// loses but still holds their records, and its acks for them land.
func TestHeldRecordsOfAnUnassignedPartitionAreStillAcked(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	produce(t, c, topic, 2, 2) // one record per partition
	a := start(t, c, group, []string{topic})
	a.m.Grant(2)
	ds := a.deliveriesN(2)
	b := start(t, c, group, []string{topic})
	a.waitFor("a rebalance", func() bool {
		return a.m.Stats().Partitions == 1 && b.m.Stats().Partitions == 1
	})
	for _, d := range ds {
		a.m.Ack(d.Key(), member.Accept)
	}
	a.ackedN(2)
	produce(t, c, topic, 2, 4)
	b.m.Grant(2) // b fetches its partition's 2 new records
	a.m.Grant(2) // a fetches its own: the one it lost is not fetched
	got := append(a.deliveriesN(4)[2:], b.deliveriesN(2)...)
	parts := map[int32]int{}
	for _, d := range got {
		parts[d.Record.Partition]++
	}
	if parts[0] != 2 || parts[1] != 2 {
		t.Errorf("after the rebalance a got %v, b got %v: want 2 records per partition", keys(a.deliveriesN(4)[2:]), keys(b.deliveriesN(2)))
	}
	for _, d := range a.deliveriesN(4)[2:] {
		a.m.Ack(d.Key(), member.Accept)
	}
	for _, d := range b.deliveriesN(2) {
		b.m.Ack(d.Key(), member.Accept)
	}
	a.ackedN(4)
	b.ackedN(2)
	waitLag(t, c, group, topic, 2)
	b.leave()
	a.leave()
}

// A member given more partitions of one broker than a fetch adds to its
// share session (a hundred) gets the records of every one of them: the
// session opens in steps, each fetch that leaves partitions for the next
// not waiting for records. One record in each of 250 partitions.
func TestSessionOfManyPartitionsOpensInSteps(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	const partitions = 250
	topic, group := c.Topic(t, partitions), c.Group(t)
	produceSized(t, c, topic, partitions, partitions, 64)
	r := start(t, c, group, []string{topic})
	newAcker(r)
	r.m.Grant(20)
	from := map[int32]bool{}
	r.waitFor("a record of every partition accepted", func() bool {
		for _, ar := range r.acked {
			if ar.Err == nil {
				from[ar.Key.Partition] = true
			}
		}
		return len(from) == partitions
	})
	r.leave()
	t.Logf("%s: stats %+v", c.Kind, r.m.Stats())
}
