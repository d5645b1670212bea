package member_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// shortLockGroup returns a group whose records lock for 2 s: kfake's
// broker lock, or the group config on Kafka, which honours it.
func shortLockGroup(t *testing.T, c *kafkatest.Cluster) (string, time.Duration) {
	t.Helper()
	if !c.HonoursGroupLockDuration {
		return c.Group(t), c.LockDuration
	}
	const lock = 2 * time.Second
	return c.GroupWith(t, map[string]string{
		groupcfg.AutoOffsetReset:      "earliest",
		groupcfg.RecordLockDurationMs: strconv.Itoa(int(lock / time.Millisecond)),
	}), lock
}

// Records stay held across later fetches with no acks, later ones are
// acked out of order, and another member gets only the offsets the member
// neither holds nor acked (facts 1, 2).
func TestRecordsStayHeldAcrossFetchesWhileLaterOnesAreAckedOutOfOrder(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 10)
	r := start(t, c, group, []string{topic})

	for i := 1; i <= 10; i++ { // one record per fetch
		r.m.Grant(1)
		r.deliveriesN(i)
	}
	ds := r.deliveriesN(10)
	if s := r.m.Stats(); s.Fetches < 10 || s.Held != 10 {
		t.Fatalf("stats %+v: want 10 fetches or more, 10 held", s)
	}
	byOffset := map[int64]member.Delivery{}
	for _, d := range ds {
		byOffset[d.Record.Offset] = d
	}
	for _, o := range []int64{9, 7, 5, 6, 8} {
		r.m.Ack(byOffset[o].Key(), member.Accept)
	}
	r.ackedN(5)

	produce(t, c, topic, 1, 5) // offsets 10..14
	o := newOther(t, c, group, topic)
	got := o.takeUntil("offsets 10..14", func(rs []*kgo.Record) bool { return len(rs) >= 5 })
	for _, rec := range got {
		if rec.Offset < 10 {
			t.Errorf("other member got offset %d, held or acked by the member", rec.Offset)
		}
	}
	for o := range int64(5) {
		r.m.Ack(byOffset[o].Key(), member.Accept)
	}
	r.ackedN(10)
	waitLag(t, c, group, topic, 1)
}

// Release redelivers a record with delivery count 2; Reject archives it.
func TestReleaseRedeliversAndRejectArchives(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 2)
	r := start(t, c, group, []string{topic})
	r.m.Grant(2)
	ds := r.deliveriesN(2)
	r.m.Ack(ds[0].Key(), member.Release)
	r.m.Ack(ds[1].Key(), member.Reject)
	r.ackedN(2)
	r.m.Grant(5)
	again := r.deliveriesN(3)[2]
	if again.Key() != ds[0].Key() || again.Count != 2 {
		t.Fatalf("after release got %v count %d, want %v count 2", again.Key(), again.Count, ds[0].Key())
	}
	r.m.Ack(again.Key(), member.Accept)
	r.ackedN(3)
	waitLag(t, c, group, topic, 1) // the rejected record counts as acked
	if s := r.m.Stats(); s.Acks[member.Release] != 1 || s.Acks[member.Reject] != 1 || s.Acks[member.Accept] != 1 || s.Held != 0 {
		t.Errorf("stats %+v", s)
	}
}

// Renewing keeps a record held past three lock periods while another
// member polls the partition and never sees it; each renewal moves the
// deadline.
func TestRenewKeepsTheRecordPastItsLock(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	group, lock := shortLockGroup(t, c)
	produce(t, c, topic, 1, 1)
	r := start(t, c, group, []string{topic})
	r.m.Grant(1)
	d := r.deliveriesN(1)[0]

	o := newOther(t, c, group, topic)
	var (
		mu       sync.Mutex
		seen     []*kgo.Record
		stopPoll = make(chan struct{})
		polled   sync.WaitGroup
	)
	polled.Add(1)
	go func() {
		defer polled.Done()
		for {
			select {
			case <-stopPoll:
				return
			default:
			}
			recs := o.poll(200 * time.Millisecond)
			mu.Lock()
			seen = append(seen, recs...)
			mu.Unlock()
		}
	}()

	held := d.Deadline
	end := time.Now().Add(3*lock + lock/2)
	for i := 0; time.Now().Before(end); i++ {
		// Renew when half the lock is left, as the executor does.
		time.Sleep(time.Until(held.Add(-lock / 2)))
		r.m.Renew(d.Key())
		r.waitFor(fmt.Sprintf("renewal %d", i+1), func() bool { return len(r.renewals) == i+1 })
		r.mu.Lock()
		rn := r.renewals[i]
		r.mu.Unlock()
		if rn.Err != nil || rn.Key != d.Key() || !rn.Deadline.After(held) {
			t.Fatalf("renewal %d: %+v, want a deadline after %v", i+1, rn, held)
		}
		held = rn.Deadline
	}
	// The other member is polling; a sentinel record shows it was.
	produce(t, c, topic, 1, 1)
	deadline := time.Now().Add(wait)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stopPoll)
	polled.Wait()
	for _, rec := range seen {
		if rec.Offset == d.Record.Offset {
			t.Fatalf("the other member got the renewed record %v", recKeys(seen))
		}
	}
	if len(seen) == 0 {
		t.Fatalf("the other member never got the sentinel record")
	}
	r.m.Ack(d.Key(), member.Accept)
	r.ackedN(1)
	if s := r.m.Stats(); s.Renewals < 3 || s.RenewErrors != 0 {
		t.Errorf("stats %+v: want 3 renewals or more, no errors", s)
	}
}

// A lock that runs out while the record is held: the same member fetches
// it again with the next count and the same key; its ack lands (fact 14).
func TestExpiredLockIsFetchedAgainByTheSameMember(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	group, _ := shortLockGroup(t, c)
	produce(t, c, topic, 1, 1)
	r := start(t, c, group, []string{topic})
	r.m.Grant(2)
	ds := r.deliveriesN(2)
	if ds[0].Key() != ds[1].Key() || ds[0].Count != 1 || ds[1].Count != 2 {
		t.Fatalf("deliveries %v counts %d, %d: want one key, counts 1 then 2", keys(ds), ds[0].Count, ds[1].Count)
	}
	if s := r.m.Stats(); s.Held != 1 || s.Credit != 0 {
		t.Errorf("stats %+v: want 1 held, no credit", s)
	}
	r.m.Ack(ds[0].Key(), member.Accept)
	r.ackedN(1)
	waitLag(t, c, group, topic, 1)
}

// The graceful stop with records held and unacked: StopFetching, Quiet,
// Leave; another member gets the unacked ones at once with count 2, the
// acked one never (fact 12: on Kafka only the close releases them).
func TestLeaveReleasesHeldRecords(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	produce(t, c, topic, 2, 4)
	r := start(t, c, group, []string{topic})
	r.m.Grant(4)
	ds := r.deliveriesN(4)
	r.m.Ack(ds[0].Key(), member.Accept)
	r.ackedN(1)
	r.m.StopFetching()
	<-r.m.Quiet()
	r.m.Ack(ds[1].Key(), member.Accept) // a job that ends during the drain
	began := time.Now()
	r.leave()
	t.Logf("%s: Leave with 2 records held took %v", c.Kind, time.Since(began))
	if s := r.m.Stats(); s.State != member.Left || s.Held != 0 || s.Acks[member.Accept] != 2 {
		t.Errorf("stats %+v", s)
	}

	o := newOther(t, c, group, topic)
	got := o.takeUntil("the 2 released records", func(rs []*kgo.Record) bool { return len(rs) >= 2 })
	want := map[member.Key]bool{ds[2].Key(): true, ds[3].Key(): true}
	for _, rec := range got {
		k := member.Key{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		if !want[k] || rec.DeliveryCount() != 2 {
			t.Errorf("other member got %v, want %v with count 2", recKeys(got), want)
		}
	}
	waitLag(t, c, group, topic, 2)
}

// Leave while the member still fetches (no StopFetching and no Quiet
// first, as the executor leaves once its shutdown deadline passed): Leave
// stops fetching itself (waiting for a long poll in flight), sends the ack
// queued with it, and releases the rest, which another member gets with
// count 2 before their locks run out.
func TestLeaveWithoutStopFetching(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	produce(t, c, topic, 1, 3)
	r := start(t, c, group, []string{topic})
	r.m.Grant(3)
	ds := r.deliveriesN(3)
	r.m.Grant(10) // nothing more to fetch: a fetch long-polls until Leave
	r.waitFor("the grant taken", func() bool { return r.m.Stats().Credit == 10 })
	r.m.Ack(ds[0].Key(), member.Accept)
	r.leaveNow()
	if a := r.ackedN(1); len(a) != 1 || a[0].Key != ds[0].Key() || a[0].Type != member.Accept {
		t.Errorf("ack results %+v, want one accept of %v", a, ds[0].Key())
	}
	if s := r.m.Stats(); s.State != member.Left || s.Held != 0 || s.Acks[member.Accept] != 1 || s.Fetched != 3 {
		t.Errorf("stats %+v", s)
	}

	o := newOther(t, c, group, topic)
	got := o.takeUntil("the 2 released records", func(rs []*kgo.Record) bool { return len(rs) >= 2 })
	if time.Now().After(ds[1].Deadline) {
		t.Errorf("the other member got them only after their locks ran out (%v): the close released nothing", ds[1].Deadline)
	}
	want := map[member.Key]bool{ds[1].Key(): true, ds[2].Key(): true}
	for _, rec := range got {
		k := member.Key{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
		if !want[k] || rec.DeliveryCount() != 2 {
			t.Errorf("other member got %v, want %v with count 2", recKeys(got), want)
		}
	}
	waitLag(t, c, group, topic, 1)
}
