package kafkatest_test

// Broker conformance: the share-group behaviours shareq depends on, pinned
// down with raw franz-go on whichever cluster kafkatest.New gives (kfake by
// default, Apache Kafka with SHAREQ_TEST_BROKERS). Where the two differ the
// test branches on a kafkatest.Cluster field and asserts each broker's
// exact behaviour; docs/kafka-differences.md lists the differences and the
// timings these tests log.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
)

const (
	// joinWait bounds how long a new member may take to get its first
	// record. The first share group on a fresh Apache Kafka broker waits
	// ~3.5 s for the share-state topic; a busy machine adds more.
	joinWait = 30 * time.Second
	// slack is what a timing assertion allows beyond the broker's own
	// bound (lock sweep, fetch wait): scheduling on a loaded 2-core box.
	slack = 1500 * time.Millisecond
	// memberFetchWait is the FetchMaxWait of test members, so a member
	// sees a record made available at most this late.
	memberFetchWait = 100 * time.Millisecond
)

// member is one share-group member: a raw kgo share client with strict
// batches of at most max records, recording every ack result.
type member struct {
	t    testing.TB
	name string
	max  int
	cl   *kgo.Client

	mu   sync.Mutex
	acks []kgo.ShareAckResult
}

func newMember(t testing.TB, c *kafkatest.Cluster, name, group, topic string, max int, opts ...kgo.Opt) *member {
	t.Helper()
	m := &member{t: t, name: name, max: max}
	m.cl = c.ShareConsumer(t, group, []string{topic}, append([]kgo.Opt{
		kgo.ShareMaxRecords(int32(max)),
		kgo.ShareMaxRecordsStrict(),
		kgo.FetchMaxWait(memberFetchWait),
		kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
			m.mu.Lock()
			m.acks = append(m.acks, rs...)
			m.mu.Unlock()
		}),
	}, opts...)...)
	return m
}

// poll polls once for at most d and returns the records.
func (m *member) poll(d time.Duration) []*kgo.Record {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	fs := m.cl.PollRecords(ctx, m.max)
	for _, e := range fs.Errors() {
		if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
			continue
		}
		m.t.Logf("%s: poll: %s[%d]: %v", m.name, e.Topic, e.Partition, e.Err)
	}
	return fs.Records()
}

// take polls until one poll returns records and requires exactly n of
// them: polling again would auto-accept a partial batch.
func (m *member) take(n int, within time.Duration) []*kgo.Record {
	m.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			m.t.Fatalf("%s: no record within %v", m.name, within)
		}
		if recs := m.poll(min(left, time.Second)); len(recs) > 0 {
			if len(recs) != n {
				m.t.Fatalf("%s: one poll returned %d records %v, want %d", m.name, len(recs), keys(recs), n)
			}
			return recs
		}
	}
}

// flush flushes acks; FlushAcks only fails on its context.
func (m *member) flush() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := m.cl.FlushAcks(ctx); err != nil {
		m.t.Fatalf("%s: FlushAcks: %v", m.name, err)
	}
}

// ackResults returns and forgets the ack results reported so far.
func (m *member) ackResults() []kgo.ShareAckResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	rs := m.acks
	m.acks = nil
	return rs
}

// ackOK flushes and requires every ack since the last check to have
// succeeded (and at least one to have been reported).
func (m *member) ackOK() {
	m.t.Helper()
	m.flush()
	rs := m.ackResults()
	if len(rs) == 0 {
		m.t.Fatalf("%s: no ack result reported", m.name)
	}
	for _, r := range rs {
		if r.Err != nil {
			m.t.Fatalf("%s: ack %s[%d]: %v", m.name, r.Topic, r.Partition, r.Err)
		}
	}
}

func keys(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%s@%d#%d", r.Key, r.Offset, r.DeliveryCount())
	}
	return out
}

func rec(topic, key string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(key)}
}

// drainToMarker produces a marker record and polls m until the marker
// arrives, accepting everything; it returns the keys delivered before the
// marker. A record produced before the marker that is still available
// would be delivered first, so an archived or accepted record must not
// appear here.
func drainToMarker(t testing.TB, c *kafkatest.Cluster, m *member, topic string) []string {
	t.Helper()
	marker := kafkatest.Name(t, "marker")
	c.Produce(t, rec(topic, marker))
	var before []string
	deadline := time.Now().Add(joinWait)
	for time.Now().Before(deadline) {
		for _, r := range m.poll(time.Second) {
			if string(r.Key) == marker {
				m.cl.MarkAcks(kgo.AckAccept)
				m.flush()
				return before
			}
			before = append(before, fmt.Sprintf("%s#%d", r.Key, r.DeliveryCount()))
		}
	}
	t.Fatalf("%s: marker not delivered within %v (before it: %v)", m.name, joinWait, before)
	return nil
}

// standby returns a member that has joined the group and taken a record
// (a marker, accepted) and now stands idle: with strict batches it fetches
// only while it polls. Timing tests start the member that is to get a
// record later this way, before another member takes that record: a
// member's first record can take longer than a lock duration on a busy
// broker.
func standby(t testing.TB, c *kafkatest.Cluster, name, group, topic string, max int) *member {
	t.Helper()
	start := time.Now()
	m := newMember(t, c, name, group, topic, max)
	if before := drainToMarker(t, c, m, topic); len(before) != 0 {
		t.Fatalf("%s: got %v before its marker", name, before)
	}
	t.Logf("%s: %s joined and got its first record in %v", c.Kind, name, time.Since(start).Round(time.Millisecond))
	return m
}

// offsets is start offset and lag per partition, as DescribeShareGroupOffsets
// reports them.
type offsets map[int32][2]int64

func describeOffsets(t testing.TB, c *kafkatest.Cluster, group, topic string) (offsets, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := c.Admin().DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	g, ok := d[group]
	if !ok {
		return nil, fmt.Errorf("group %s not described", group)
	}
	if g.Err != nil {
		return nil, g.Err
	}
	out := offsets{}
	for p, o := range g.Offsets[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, o.Err)
		}
		out[p] = [2]int64{o.StartOffset, o.Lag}
	}
	return out, nil
}

// waitOffsets waits (bounded) until the group's offsets on topic are
// exactly want: acks and state writes land asynchronously on Kafka.
func waitOffsets(t testing.TB, c *kafkatest.Cluster, group, topic string, want offsets) {
	t.Helper()
	waitOffsetsFunc(t, c, group, topic, fmt.Sprint(want), func(got offsets) bool { return maps.Equal(got, want) })
}

// waitOffsetsFunc waits (bounded) until the group's offsets on topic
// satisfy ok; want describes them for the failure message.
func waitOffsetsFunc(t testing.TB, c *kafkatest.Cluster, group, topic, want string, ok func(offsets) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got offsets
	var err error
	for time.Now().Before(deadline) {
		got, err = describeOffsets(t, c, group, topic)
		if err == nil && ok(got) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("share offsets of %s on %s: got %v (err %v), want %v ({partition: [start offset, lag]})", group, topic, got, err, want)
}

// reportedStart is the start offset DescribeShareGroupOffsets reports:
// the current one, or, where the broker reports a stale one
// (StaleShareStartOffset), the start offset before the latest share-state
// write.
func reportedStart(c *kafkatest.Cluster, current, beforeLastWrite int64) int64 {
	if c.StaleShareStartOffset {
		return beforeLastWrite
	}
	return current
}

// 1. A record whose member neither acks nor polls again is redelivered,
// with delivery count 2, once its lock runs out: not before the lock
// duration, and no later than the lock duration plus the broker's sweep.
func TestLockExpiryRedelivers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	b := standby(t, c, "b", group, topic, 1)
	c.Produce(t, rec(topic, "job"))

	a := newMember(t, c, "a", group, topic, 1)
	pollStart := time.Now()
	r := a.take(1, joinWait)[0]
	if r.DeliveryCount() != 1 {
		t.Fatalf("first delivery count %d, want 1", r.DeliveryCount())
	}
	deadline := r.AcquisitionDeadline()
	if lock := time.Until(deadline); lock > c.LockDuration || lock < c.LockDuration-2*time.Second {
		t.Fatalf("acquisition deadline in %v, want about the lock duration %v", lock, c.LockDuration)
	}

	// a holds the record, stays in the group, and does nothing.
	got := b.take(1, c.LockDuration+c.LockSweep+joinWait)[0]
	at := time.Now()
	if string(got.Key) != "job" || got.DeliveryCount() != 2 {
		t.Fatalf("b got %v, want job with delivery count 2", keys([]*kgo.Record{got}))
	}
	// The broker acquired the record after a's poll began, so its lock
	// cannot run out before pollStart+lock; a's deadline is a's receipt
	// plus the lock, no earlier than the broker's.
	if at.Before(pollStart.Add(c.LockDuration)) {
		t.Fatalf("redelivered %v after a's poll began, before the lock duration %v", at.Sub(pollStart), c.LockDuration)
	}
	if late := at.Sub(deadline); late > c.LockSweep+memberFetchWait+slack {
		t.Fatalf("redelivered %v after a's acquisition deadline, want at most sweep %v + fetch wait + slack", late, c.LockSweep)
	}
	t.Logf("%s: lock %v: redelivered %v after a's acquisition deadline (%v after a's poll began)",
		c.Kind, c.LockDuration, at.Sub(deadline).Round(time.Millisecond), at.Sub(pollStart).Round(time.Millisecond))
	got.Ack(kgo.AckAccept)
	b.ackOK()
}

// 2. A record released on every delivery is delivered exactly the delivery
// limit times, then archived: never delivered again. Apache Kafka takes the
// limit from the group config share.delivery.count.limit; kfake only from
// its broker config.
func TestDeliveryLimitArchives(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	const groupLimit = 3
	want := c.DeliveryLimit
	if c.GroupDeliveryLimitConfig {
		c.SetGroupConfig(t, group, map[string]string{groupcfg.DeliveryCountLimit: strconv.Itoa(groupLimit)})
		if c.HonoursGroupDeliveryLimit {
			want = groupLimit
		}
	} else {
		// Kafka 4.2: the limit is the broker's alone.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := groupcfg.Set(ctx, c.Client(t), group, map[string]string{groupcfg.DeliveryCountLimit: strconv.Itoa(groupLimit)})
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("Kafka %s: setting %s: %v, want INVALID_CONFIG", c.Version, groupcfg.DeliveryCountLimit, err)
		}
	}
	if groupLimit == c.DeliveryLimit {
		t.Fatalf("test needs a group limit different from the broker's %d", c.DeliveryLimit)
	}
	c.Produce(t, rec(topic, "poison"))

	m := newMember(t, c, "m", group, topic, 1)
	for i := 1; i <= want; i++ {
		r := m.take(1, joinWait)[0]
		if string(r.Key) != "poison" || int(r.DeliveryCount()) != i {
			t.Fatalf("delivery %d: got %v, want poison with delivery count %d", i, keys([]*kgo.Record{r}), i)
		}
		r.Ack(kgo.AckRelease)
		m.ackOK()
	}
	if before := drainToMarker(t, c, m, topic); len(before) != 0 {
		t.Fatalf("after %d releases (limit %d) still delivered: %v", want, want, before)
	}
	// Archived and accepted records are both "delivery complete". Kafka's
	// last write (the marker's accept) ran with start offset 1.
	waitOffsets(t, c, group, topic, offsets{0: {reportedStart(c, 2, 1), 0}})
	t.Logf("%s: group limit %d, broker limit %d: delivered %d times, then archived", c.Kind, groupLimit, c.DeliveryLimit, want)
}

// Records released again and again: each is delivered exactly the
// delivery limit times on both brokers, but Apache Kafka throttles them:
// records already delivered ceil(limit/2) times come in batches halved for
// each delivery past that, and a record on its last delivery comes alone.
// kfake returns the whole batch every time.
func TestRedeliveryThrottling(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	if c.DeliveryLimit != 5 {
		t.Skipf("batch sizes below are for the delivery limit 5, broker has %d", c.DeliveryLimit)
	}
	topic, group := c.Topic(t, 1), c.Group(t)
	const n = 8
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, rec(topic, fmt.Sprintf("r%d", i)))
	}
	c.Produce(t, recs...)
	m := newMember(t, c, "m", group, topic, 2*n)
	deliveries := map[string]int{}
	var sizes []int
	deadline := time.Now().Add(joinWait)
	for total := 0; total < n*c.DeliveryLimit; {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d times within %v: batches %v", total, n*c.DeliveryLimit, joinWait, sizes)
		}
		got := m.poll(time.Second)
		if len(got) == 0 {
			continue
		}
		sizes = append(sizes, len(got))
		for _, r := range got {
			deliveries[string(r.Key)]++
			if int(r.DeliveryCount()) != deliveries[string(r.Key)] {
				t.Fatalf("%v: delivery count %d on delivery %d", keys(got), r.DeliveryCount(), deliveries[string(r.Key)])
			}
			if int(r.DeliveryCount()) == c.DeliveryLimit && c.ThrottlesRedelivery && len(got) != 1 {
				t.Fatalf("last delivery of %s came with others: %v", r.Key, keys(got))
			}
		}
		total += len(got)
		m.cl.MarkAcks(kgo.AckRelease)
		m.ackOK()
	}
	want := []int{8, 8, 8, 8, 8}
	if c.ThrottlesRedelivery {
		// Deliveries 1-3 whole. Records already delivered ceil(5/2) = 3
		// times come in halves (8>>1), and the 5th, last delivery one
		// record at a time. Which half comes first varies: seen as
		// 8 8 8 4 1 1 1 1 4 1 1 1 1 and as 8 8 8 4 4 1 1 1 1 1 1 1 1.
		want = []int{8, 8, 8, 4, 1, 1, 1, 1, 4, 1, 1, 1, 1}
	}
	if !slices.Equal(sizes[:min(3, len(sizes))], want[:3]) || !slices.Equal(slices.Sorted(slices.Values(sizes)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("batch sizes %v, want %v (the batches after the third in any order)", sizes, want)
	}
	for k, d := range deliveries {
		if d != c.DeliveryLimit {
			t.Fatalf("%s delivered %d times, want %d", k, d, c.DeliveryLimit)
		}
	}
	if before := drainToMarker(t, c, m, topic); len(before) != 0 {
		t.Fatalf("delivered after the limit: %v", before)
	}
	t.Logf("%s: batch sizes %v", c.Kind, sizes)
}

// 3. RENEW every half lock holds a record past three lock durations with
// no other member getting it; the client never moves
// AcquisitionDeadline. With share.renew.acknowledge.enable=false (Apache
// Kafka 4.3+) a RENEW fails in the ack callback with INVALID_RECORD_STATE
// while FlushAcks returns nil.
func TestRenewHoldsLock(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.Produce(t, rec(topic, "slow"))

	a := newMember(t, c, "a", group, topic, 1)
	r := a.take(1, joinWait)[0]
	taken := time.Now()
	deadline := r.AcquisitionDeadline()
	b := newMember(t, c, "b", group, topic, 1)

	hold := 3*c.LockDuration + c.LockDuration/4
	nextRenew := taken.Add(c.LockDuration / 2)
	renews := 0
	for time.Since(taken) < hold {
		if !time.Now().Before(nextRenew) {
			r.Ack(kgo.AckRenew)
			a.ackOK() // FlushAcks sends it now; the broker confirmed it
			renews++
			nextRenew = nextRenew.Add(c.LockDuration / 2)
			if !r.AcquisitionDeadline().Equal(deadline) {
				t.Fatalf("AcquisitionDeadline moved by a renew: %v -> %v", deadline, r.AcquisitionDeadline())
			}
		}
		if got := b.poll(min(200*time.Millisecond, time.Until(nextRenew)+time.Millisecond)); len(got) > 0 {
			t.Fatalf("b got %v %v after a took it, while a renews (%d renews)", keys(got), time.Since(taken), renews)
		}
	}
	if time.Now().Before(deadline.Add(2 * c.LockDuration)) {
		t.Fatalf("held only until %v past the original deadline", time.Until(deadline))
	}
	r.Ack(kgo.AckAccept)
	a.ackOK()
	if before := drainToMarker(t, c, b, topic); len(before) != 0 {
		t.Fatalf("b got %v after a renewed and accepted", before)
	}
	t.Logf("%s: held %v (%d renews, lock %v)", c.Kind, time.Since(taken).Round(time.Millisecond), renews, c.LockDuration)
}

func TestRenewDisabledByGroupConfig(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	if !c.RenewAckConfig {
		// kfake and Kafka 4.2 do not know the config: RENEW is always
		// allowed (TestRenewHoldsLock).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := groupcfg.Set(ctx, c.Client(t), kafkatest.Name(t, "g"), map[string]string{groupcfg.RenewAckEnable: "false"})
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("setting %s on %s: %v, want INVALID_CONFIG", groupcfg.RenewAckEnable, c.Kind, err)
		}
		return
	}
	group := c.GroupWith(t, map[string]string{
		groupcfg.AutoOffsetReset: "earliest",
		groupcfg.RenewAckEnable:  "false",
	})
	c.Produce(t, rec(topic, "job"))
	a := newMember(t, c, "a", group, topic, 1)
	r := a.take(1, joinWait)[0]
	r.Ack(kgo.AckRenew)
	a.flush() // returns nil although the renew fails
	rs := a.ackResults()
	if len(rs) != 1 || !errors.Is(rs[0].Err, kerr.InvalidRecordState) {
		t.Fatalf("renew with %s=false: ack results %v, want one INVALID_RECORD_STATE", groupcfg.RenewAckEnable, rs)
	}
	// The failed renew leaves the record acquired by a, on its original
	// lock: a can still accept it.
	r.Ack(kgo.AckAccept)
	a.ackOK()
	waitOffsets(t, c, group, topic, offsets{0: {reportedStart(c, 1, 0), 0}})
}

// 5. RELEASE makes a record available again at once, with delivery count
// 2 on the next delivery; REJECT archives it.
func TestReleaseRedeliversRejectArchives(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.Produce(t, rec(topic, "released"), rec(topic, "rejected"))

	a := newMember(t, c, "a", group, topic, 2)
	recs := a.take(2, joinWait)
	recs[0].Ack(kgo.AckRelease)
	recs[1].Ack(kgo.AckReject)
	a.ackOK()
	start := time.Now()
	again := a.take(1, joinWait)
	if string(again[0].Key) != "released" || again[0].DeliveryCount() != 2 {
		t.Fatalf("after release/reject got %v, want released with delivery count 2", keys(again))
	}
	if d := time.Since(start); d > c.LockDuration/2 {
		t.Fatalf("released record took %v to come back (lock %v)", d, c.LockDuration)
	}
	again[0].Ack(kgo.AckAccept)
	a.ackOK()
	if before := drainToMarker(t, c, a, topic); len(before) != 0 {
		t.Fatalf("rejected record delivered again: %v", before)
	}
	waitOffsets(t, c, group, topic, offsets{0: {reportedStart(c, 3, 2), 0}})
}

// 6. share.auto.offset.reset: a new group starts at the end of the log
// (latest, the default), or at its start with earliest. The start is
// fixed when the group first fetches the partition.
func TestAutoOffsetReset(t *testing.T) {
	t.Parallel()
	for _, reset := range []string{"latest", "earliest"} {
		t.Run(reset, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.New(t)
			topic := c.Topic(t, 1)
			var group string
			if reset == "latest" {
				group = c.GroupWith(t, nil) // the broker default
			} else {
				group = c.GroupWith(t, map[string]string{groupcfg.AutoOffsetReset: reset})
			}
			c.Produce(t, rec(topic, "before"))
			m := newMember(t, c, "m", group, topic, 1)
			// Until the member gets something, keep producing
			// markers: with latest the group starts at whatever
			// the end is when its first fetch arrives.
			deadline := time.Now().Add(joinWait)
			var first []*kgo.Record
			for i := 0; len(first) == 0; i++ {
				if time.Now().After(deadline) {
					t.Fatalf("nothing delivered within %v", joinWait)
				}
				if first = m.poll(500 * time.Millisecond); len(first) == 0 && reset == "latest" {
					c.Produce(t, rec(topic, fmt.Sprintf("after-%d", i)))
				}
			}
			switch k := string(first[0].Key); {
			case reset == "earliest" && k != "before":
				t.Fatalf("earliest: first delivery %v, want before", keys(first))
			case reset == "latest" && !strings.HasPrefix(k, "after-"):
				t.Fatalf("latest: first delivery %v, want a record produced after the group's first fetch", keys(first))
			}
			first[0].Ack(kgo.AckAccept)
			m.ackOK()
		})
	}
}

// Group configs as DescribeConfigs reports them for a group nobody
// configured: Apache Kafka lists every group config with its default
// (share.auto.offset.reset=latest, renew enabled, the broker's limit and
// lock); kfake lists only configs set on the group.
func TestGroupConfigDefaults(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	group := c.GroupWith(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := []string{groupcfg.AutoOffsetReset, groupcfg.DeliveryCountLimit, groupcfg.RecordLockDurationMs, groupcfg.RenewAckEnable}
	got, err := groupcfg.Describe(ctx, c.Client(t), group, names...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if c.DescribesGroupConfigDefaults {
		want = map[string]string{
			groupcfg.AutoOffsetReset:      "latest",
			groupcfg.RecordLockDurationMs: strconv.Itoa(int(c.LockDuration / time.Millisecond)),
		}
		// Kafka 4.3 added both.
		if c.GroupDeliveryLimitConfig {
			want[groupcfg.DeliveryCountLimit] = strconv.Itoa(c.DeliveryLimit)
		}
		if c.RenewAckConfig {
			want[groupcfg.RenewAckEnable] = "true"
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("%s describes a fresh group's configs %v as %v, want %v", c.Kind, names, got, want)
	}
}

// The group config share.record.lock.duration.ms: Apache Kafka uses it for
// the group's locks (and announces it in the fetch response, so in
// AcquisitionDeadline); kfake keeps its broker lock duration.
func TestGroupLockDuration(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	const groupLock = time.Second // the test broker's minimum
	group := c.GroupWith(t, map[string]string{
		groupcfg.AutoOffsetReset:      "earliest",
		groupcfg.RecordLockDurationMs: strconv.Itoa(int(groupLock / time.Millisecond)),
	})
	want := c.LockDuration
	if c.HonoursGroupLockDuration {
		want = groupLock
	}
	b := standby(t, c, "b", group, topic, 1)
	c.Produce(t, rec(topic, "job"))
	a := newMember(t, c, "a", group, topic, 1)
	// Warm up: the first poll may wait for the group to form.
	var r *kgo.Record
	var pollStart, pollEnd time.Time
	for deadline := time.Now().Add(joinWait); r == nil; {
		if time.Now().After(deadline) {
			t.Fatalf("nothing delivered within %v", joinWait)
		}
		pollStart = time.Now()
		recs := a.poll(time.Second)
		pollEnd = time.Now()
		if len(recs) > 0 {
			r = recs[0]
		}
	}
	// AcquisitionDeadline is the client's receipt time plus the lock the
	// broker announced.
	acq := r.AcquisitionDeadline().Add(-want)
	if acq.Before(pollStart.Add(-time.Millisecond)) || acq.After(pollEnd.Add(time.Millisecond)) {
		t.Fatalf("acquisition deadline %v after the poll began, want %v..%v (lock %v)",
			r.AcquisitionDeadline().Sub(pollStart), want, want+pollEnd.Sub(pollStart), want)
	}
	got := b.take(1, want+joinWait)[0]
	at := time.Now()
	if got.DeliveryCount() != 2 {
		t.Fatalf("b got %v, want delivery count 2", keys([]*kgo.Record{got}))
	}
	if at.Before(pollStart.Add(want)) || at.After(r.AcquisitionDeadline().Add(c.LockSweep+memberFetchWait+slack)) {
		t.Fatalf("redelivered %v after a's poll began, want lock %v (+ sweep %v + slack)", at.Sub(pollStart), want, c.LockSweep)
	}
	t.Logf("%s: group lock %v set, lock applied %v: redelivered %v after a's acquisition deadline",
		c.Kind, groupLock, want, at.Sub(r.AcquisitionDeadline()).Round(time.Millisecond))
	got.Ack(kgo.AckAccept)
	b.ackOK()
}

// 7. Share-group lag (KIP-1226): per partition, the start offset is the
// first offset not yet delivery complete (accepted, rejected or archived),
// and lag = high watermark - start offset - records at or past the start
// offset that are delivery complete. Acquired and released records count
// as lag.
func TestShareGroupLag(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	prod := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(p int32, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			r := rec(topic, fmt.Sprintf("p%d-%d", p, i))
			r.Partition = p
			recs = append(recs, r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	a := newMember(t, c, "a", group, topic, 20)
	// Partition 1: 3 records, all accepted.
	produce(1, 3)
	for _, r := range a.take(3, joinWait) {
		r.Ack(kgo.AckAccept)
	}
	a.ackOK()
	// Partition 0: 6 records. Accept 0 and 1, reject 3, release 4; 2 and
	// 5 stay acquired by a (no further poll).
	produce(0, 6)
	recs := a.take(6, joinWait)
	for _, r := range recs {
		if r.Partition != 0 {
			t.Fatalf("got %v, want partition 0 only", keys(recs))
		}
		switch r.Offset {
		case 0, 1:
			r.Ack(kgo.AckAccept)
		case 3:
			r.Ack(kgo.AckReject)
		case 4:
			r.Ack(kgo.AckRelease)
		}
	}
	a.ackOK()
	// p0: start 2 (offset 2 is acquired); complete at or past it: 3;
	// lag 6-2-1 = 3 (offsets 2, 4, 5). p1: start 3, lag 0. Kafka reports
	// the start offsets its writes ran with: 0 on both partitions, each
	// written once; the lag is the same.
	waitOffsets(t, c, group, topic, offsets{0: {reportedStart(c, 2, 0), 3}, 1: {reportedStart(c, 3, 0), 0}})
	got1, _ := describeOffsets(t, c, group, topic)
	// Accept 2 and 5 (still locked by a): start 4 (offset 4 was
	// released), lag 1. Kafka's write ran with start offset 2.
	for _, r := range recs {
		if r.Offset == 2 || r.Offset == 5 {
			r.Ack(kgo.AckAccept)
		}
	}
	a.ackOK()
	waitOffsets(t, c, group, topic, offsets{0: {reportedStart(c, 4, 2), 1}, 1: {reportedStart(c, 3, 0), 0}})
	got2, _ := describeOffsets(t, c, group, topic)
	t.Logf("%s: {partition: [start offset, lag]} = %v, then %v", c.Kind, got1, got2)
}

// 8. A member that dies holding records (SIGKILL: its connections close,
// it never acks or leaves) loses them to another member. Both brokers
// release them when the connection closes, well before the lock or the
// session timeout, and count the delivery: the next one is number 2.
func TestCrashedMemberRecordsRedelivered(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	b := standby(t, c, "b", group, topic, 2) // marker at offset 0
	c.Produce(t, rec(topic, "held-1"), rec(topic, "held-2"))
	held, kill := kafkatest.StartCrashMember(t, c, group, topic, 2)
	if len(held) != 2 || held[0].Offset != 1 || held[1].Offset != 2 {
		t.Fatalf("crash member holds %v, want offsets 1 and 2", held)
	}
	killed := time.Now()
	kill()
	recs := b.take(2, c.LockDuration+joinWait)
	took := time.Since(killed)
	const wantCount = 2
	for _, r := range recs {
		if !strings.HasPrefix(string(r.Key), "held-") || r.DeliveryCount() != wantCount {
			t.Fatalf("after the crash b got %v, want held-1 and held-2 with delivery count %d", keys(recs), wantCount)
		}
	}
	// Released on connection close: sooner than the session timeout
	// (3 s on both test brokers) and the lock.
	if limit := min(c.LockDuration, 3*time.Second) / 2; took > limit {
		t.Fatalf("redelivered %v after SIGKILL, want under %v (release on disconnect)", took, limit)
	}
	t.Logf("%s: redelivered %v after SIGKILL, delivery count %d (lock %v)", c.Kind, took.Round(time.Millisecond), wantCount, c.LockDuration)
	b.cl.MarkAcks(kgo.AckAccept)
	b.ackOK()
}

// Close releases what the last poll returned (an explicit RELEASE, not an
// abandoned session), so the delivery counts on both brokers and the
// records come back at once.
func TestCloseReleases(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	b := standby(t, c, "b", group, topic, 1)
	c.Produce(t, rec(topic, "job"))
	a := newMember(t, c, "a", group, topic, 1)
	a.take(1, joinWait)
	closed := time.Now()
	a.cl.Close()
	r := b.take(1, c.LockDuration+joinWait)[0]
	took := time.Since(closed)
	if string(r.Key) != "job" || r.DeliveryCount() != 2 {
		t.Fatalf("after a closed b got %v, want job with delivery count 2", keys([]*kgo.Record{r}))
	}
	if took > c.LockDuration/2 {
		t.Fatalf("redelivered %v after Close, want well under the lock %v", took, c.LockDuration)
	}
	t.Logf("%s: redelivered %v after Close", c.Kind, took.Round(time.Millisecond))
	r.Ack(kgo.AckAccept)
	b.ackOK()
}
