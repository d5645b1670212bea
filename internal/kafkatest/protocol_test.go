package kafkatest_test

// Share-protocol conformance: each test pins one protocol fact the
// share-group member (internal/member) relies on, with raw ShareFetch,
// ShareAcknowledge and ShareGroupHeartbeat requests (sharewire_test.go),
// on whichever cluster kafkatest.New gives. The facts are numbered as in
// the table of protocol facts in docs/architecture.md; where kfake and Apache Kafka
// differ the test branches on a kafkatest.Cluster field and asserts each
// broker's exact answer (docs/kafka-differences.md lists them).

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
)

var (
	errNone               = int16(0)
	errInvalidRequest     = kerr.InvalidRequest.Code
	errInvalidRecordState = kerr.InvalidRecordState.Code
	errInvalidEpoch       = kerr.InvalidShareSessionEpoch.Code
	errSessionNotFound    = kerr.ShareSessionNotFound.Code
	errUnknownMember      = kerr.UnknownMemberID.Code
)

// protoSetup is a cluster, a topic with n partitions holding the given
// records (keys "r0", "r1", … on partition 0) and a group reading from
// the earliest offset.
func protoSetup(t *testing.T, partitions int32, records int) (c *kafkatest.Cluster, topic, group string) {
	t.Helper()
	t.Parallel()
	c = kafkatest.New(t)
	topic = c.Topic(t, partitions)
	group = c.Group(t)
	produceN(t, c, topic, 0, records)
	return c, topic, group
}

// produceN produces n records to partition 0 with keys r<from>…
func produceN(t *testing.T, c *kafkatest.Cluster, topic string, from, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = rec(topic, "r"+strconv.Itoa(from+i))
		recs[i].Partition = 0
	}
	c.Produce(t, recs...)
}

func wantOffsets(t *testing.T, who string, recs []got, want ...int64) {
	t.Helper()
	if !slices.Equal(offs(recs), want) {
		t.Fatalf("%s: got %v, want offsets %v", who, recs, want)
	}
}

func wantCode(t *testing.T, what string, got, want int16) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %s, want %s", what, code(got), code(want))
	}
}

// idle fetches once (MaxWait pollWait) and requires no records.
func idle(t *testing.T, m *wireMember) {
	t.Helper()
	r := m.fetch(1)
	m.okFetch(r)
	if len(r.recs) != 0 {
		t.Fatalf("%s: got %v, want nothing", m.name, r.recs)
	}
}

// Fact 1: records stay acquired across later ShareFetches that carry no
// acks: the member's next fetch and a second member get only later
// offsets, and the lag counts every held record.
func TestShareRecordsStayAcquiredAcrossFetches(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 4)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)

	wantOffsets(t, "a", a.take(2), 0, 1)
	wantOffsets(t, "a's next fetch", a.take(1), 2)
	wantOffsets(t, "b", b.take(1), 3)
	waitLag(t, c, group, topic, map[int32]int64{0: 4})
}

// Fact 2: ACCEPT works one record at a time, piggybacked on a ShareFetch
// or in a ShareAcknowledge, in any order across requests. RELEASE
// redelivers with the delivery count + 1; REJECT and GAP count as acked.
func TestShareAckTypesPerRecord(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 5)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(5), 0, 1, 2, 3, 4)

	a.okAck(a.ack(acks(ackAccept, 0, 2)...))
	r := a.fetch(1, acks(ackAccept, 0, 1)...) // 1 after 2, piggybacked
	a.okFetch(r)
	if len(r.recs) != 0 {
		t.Fatalf("a holds every record, yet its fetch got %v", r.recs)
	}
	a.okAck(a.ack(append(acks(ackRelease, 0, 3), acks(ackReject, 0, 4)...)...))
	again := a.take(1)
	if again[0].off != 3 || again[0].count != 2 {
		t.Fatalf("after RELEASE of 3: got %v, want 0@3#2", again)
	}
	a.okAck(a.ack(append(acks(ackGap, 0, 0), acks(ackAccept, 0, 3)...)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 3: within one partition of one request, ack batches must ascend
// and must not overlap; one batch per record, and a type per offset
// inside one batch, are fine.
func TestShareAckBatchesMustAscend(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 4)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(4), 0, 1, 2, 3)

	r := a.ack(append(acks(ackAccept, 0, 2), acks(ackAccept, 0, 0)...)...)
	wantCode(t, "batches 2, 0", r.err, errNone)
	wantCode(t, "batches 2, 0: partition", r.parts[0], errInvalidRequest)

	overlap := errInvalidRequest
	if c.OverlapAckInvalidRecordState {
		overlap = errInvalidRecordState
	}
	r = a.ack(ackBatch{p: 0, first: 0, last: 1, types: []int8{ackAccept}}, ackBatch{p: 0, first: 1, last: 2, types: []int8{ackAccept}})
	wantCode(t, "batches 0-1, 1-2", r.err, errNone)
	wantCode(t, "batches 0-1, 1-2: partition", r.parts[0], overlap)

	// Neither failed list was applied: every offset is still held.
	a.okAck(a.ack(append(acks(ackAccept, 0, 0, 1), ackBatch{p: 0, first: 2, last: 3, types: []int8{ackAccept, ackRelease}})...))
	again := a.take(1)
	if again[0].off != 3 || again[0].count != 2 {
		t.Fatalf("after RELEASE of 3 in a per-offset batch: got %v, want 0@3#2", again)
	}
	a.okAck(a.ack(acks(ackAccept, 0, 3)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 4: a partition's ack list is all-or-nothing. One bad ack (already
// acked, held by another member: INVALID_RECORD_STATE; past the log
// end, an unknown type: INVALID_REQUEST) fails the partition's whole list and the good acks in it are not
// applied. An ack below the share-partition start offset is ignored.
func TestShareAckListAllOrNothing(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 4)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	wantOffsets(t, "a", a.take(3), 0, 1, 2)
	wantOffsets(t, "b", b.take(1), 3)
	a.okAck(a.ack(acks(ackAccept, 0, 2)...))

	for _, tc := range []struct {
		name string
		bad  ackBatch
		want int16
	}{
		{"already acked", ackBatch{p: 0, first: 2, last: 2, types: []int8{ackAccept}}, errInvalidRecordState},
		{"held by another member", ackBatch{p: 0, first: 3, last: 3, types: []int8{ackAccept}}, errInvalidRecordState},
		{"past the log end", ackBatch{p: 0, first: 9, last: 9, types: []int8{ackAccept}}, errInvalidRequest},
		{"unknown type", ackBatch{p: 0, first: 1, last: 1, types: []int8{7}}, errInvalidRequest},
	} {
		r := a.ack(append(acks(ackAccept, 0, 0), tc.bad)...)
		wantCode(t, tc.name, r.err, errNone)
		wantCode(t, tc.name+": partition", r.parts[0], tc.want)
	}

	// The good acks were not applied: 0 and 1 are still held by a.
	a.okAck(a.ack(acks(ackAccept, 0, 0, 1)...))
	b.okAck(b.ack(acks(ackAccept, 0, 3)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
	// Below the start offset (4 now): ignored, no error.
	a.okAck(a.ack(acks(ackAccept, 0, 0)...))
}

// Fact 5: a renew-only ShareAcknowledge (IsRenewAck, RENEW acks) restarts
// the lock each time and announces the lock duration; a member renewing
// every quarter lock holds its record for two lock durations while
// another member fetches and never sees it. RENEW and ACCEPT mix in one
// renew request.
func TestShareRenewOnlyRequest(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)
	held := a.take(1)
	start := time.Now()
	lastRenew := start
	renews := 0
	for time.Since(start) < 2*c.LockDuration {
		if time.Since(lastRenew) >= c.LockDuration/4 {
			lastRenew = time.Now()
			r := a.renew(acks(ackRenew, 0, held[0].off)...)
			a.okAck(r)
			if want := int32(c.LockDuration / time.Millisecond); r.lockMs != want {
				t.Fatalf("renew announced a %d ms lock, want %d", r.lockMs, want)
			}
			renews++
		}
		idle(t, b)
	}
	t.Logf("%s: held one record %v with %d renews", c.Kind, time.Since(start).Round(time.Millisecond), renews)

	produceN(t, c, topic, 1, 1)
	wantOffsets(t, "a", a.take(1), 1)
	a.okAck(a.renew(append(acks(ackRenew, 0, 0), acks(ackAccept, 0, 1)...)...))
	a.okAck(a.ack(acks(ackAccept, 0, 0)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 6: a RENEW cannot ride on a ShareFetch that fetches. In a
// ShareFetch without IsRenewAck it fails the partition's acks on Apache
// Kafka (kfake reports no error); a ShareFetch with IsRenewAck and any
// fetch parameter fails whole on both. A renew-only ShareFetch
// (IsRenewAck, every fetch parameter 0) renews on both.
func TestShareRenewInFetchingRequest(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 1)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(1), 0)

	r := a.fetch(1, acks(ackRenew, 0, 0)...)
	wantCode(t, "RENEW in a ShareFetch without IsRenewAck", r.err, errNone)
	if c.RejectsRenewInFetch {
		wantCode(t, "RENEW in a ShareFetch without IsRenewAck: partition ack", r.ackErr(0), errInvalidRequest)
	} else {
		a.okFetch(r)
	}

	req := a.fetchReq(1, acks(ackRenew, 0, 0)...)
	req.IsRenewAck = true
	r = a.sendFetch(a.cl, req)
	wantCode(t, "ShareFetch with IsRenewAck and MaxRecords", r.err, errInvalidRequest)

	r = a.sendFetch(a.cl, a.renewFetchReq(acks(ackRenew, 0, 0)...))
	a.advance(r.err)
	a.okFetch(r)
	if len(r.recs) != 0 {
		t.Fatalf("renew-only ShareFetch acquired %v", r.recs)
	}
	a.okAck(a.ack(acks(ackAccept, 0, 0)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 7: RENEW then ACCEPT of a record both succeed; a RENEW or a second
// ACCEPT after the ACCEPT gets INVALID_RECORD_STATE. (Offset 0 stays held
// so the accepted records stay above the share-partition start offset,
// where acks are checked at all: see fact 4.)
func TestShareRenewThenAccept(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 3)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(3), 0, 1, 2)

	a.okAck(a.renew(acks(ackRenew, 0, 1)...))
	a.okAck(a.ack(acks(ackAccept, 0, 1)...))

	a.okAck(a.ack(acks(ackAccept, 0, 2)...))
	r := a.renew(acks(ackRenew, 0, 2)...)
	wantCode(t, "RENEW after ACCEPT", r.err, errNone)
	wantCode(t, "RENEW after ACCEPT: partition", r.parts[0], errInvalidRecordState)
	r = a.ack(acks(ackAccept, 0, 2)...)
	wantCode(t, "second ACCEPT", r.err, errNone)
	wantCode(t, "second ACCEPT: partition", r.parts[0], errInvalidRecordState)
	a.okAck(a.ack(acks(ackAccept, 0, 0)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 8: a ShareFetch with session epoch 0 while the member holds
// records opens a new session without releasing them; the new session
// acknowledges them.
func TestShareSessionEpochZeroKeepsRecords(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 2)
	wantOffsets(t, "a", a.take(2), 0, 1)

	a.epoch = 0
	idle(t, a) // the new session does not hand a its records again
	idle(t, b) // nor are they released to b
	a.okAck(a.ack(acks(ackAccept, 0, 0, 1)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 9: a request with a wrong session epoch fails with
// INVALID_SHARE_SESSION_EPOCH and changes nothing: the records stay held
// and the next request at the right epoch succeeds. A ShareAcknowledge
// cannot open a session (epoch 0).
func TestShareWrongEpoch(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 1)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(1), 0)

	req := a.ackReq(false, acks(ackAccept, 0, 0)...)
	req.ShareSessionEpoch = a.epoch + 5
	wantCode(t, "ShareAcknowledge epoch +5", a.sendAck(a.cl, req).err, errInvalidEpoch)
	freq := a.fetchReq(1, acks(ackAccept, 0, 0)...)
	freq.ShareSessionEpoch = a.epoch + 5
	wantCode(t, "ShareFetch epoch +5", a.sendFetch(a.cl, freq).err, errInvalidEpoch)
	req.ShareSessionEpoch = 0
	wantCode(t, "ShareAcknowledge epoch 0", a.sendAck(a.cl, req).err, errInvalidEpoch)

	a.okAck(a.ack(acks(ackAccept, 0, 0)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 10: epoch -1, on a ShareFetch or a ShareAcknowledge, closes the
// session and releases its records at once; a later request with an
// epoch above 0 gets SHARE_SESSION_NOT_FOUND.
func TestShareCloseSessionReleases(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)

	wantOffsets(t, "a", a.take(1), 0)
	next := a.epoch
	req := a.fetchReq(0)
	req.ShareSessionEpoch = -1
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 0, 0, 0
	req.Topics = nil
	r := a.sendFetch(a.cl, req)
	a.okFetch(r)
	again := b.take(1)
	if again[0].off != 0 || again[0].count != 2 {
		t.Fatalf("b after a's ShareFetch epoch -1: got %v, want 0@0#2", again)
	}
	a.epoch = next
	wantCode(t, "ShareFetch after close", a.fetch(1).err, errSessionNotFound)

	produceN(t, c, topic, 1, 1)
	a.epoch = 0
	wantOffsets(t, "a in a new session", a.take(1), 1)
	next = a.epoch
	a.okAck(a.closeSession())
	again = b.take(1)
	if again[0].off != 1 || again[0].count != 2 {
		t.Fatalf("b after a's ShareAcknowledge epoch -1: got %v, want 0@1#2", again)
	}
	a.epoch = next
	wantCode(t, "ShareAcknowledge after close", a.ack().err, errSessionNotFound)
	a.epoch = -1
	b.okAck(b.ack(acks(ackAccept, 0, 0, 1)...))
}

// Fact 11: closing the connection releases the member's records
// (redelivered with count 2), without a session close or a leave.
func TestShareConnectionCloseReleases(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)
	wantOffsets(t, "a", a.take(1), 0)

	closed := time.Now()
	a.closeClient()
	again := b.take(1)
	if again[0].off != 0 || again[0].count != 2 {
		t.Fatalf("b after a's connection closed: got %v, want 0@0#2", again)
	}
	t.Logf("%s: b got the record %v after a's client closed", c.Kind, time.Since(closed).Round(time.Millisecond))
	b.okAck(b.ack(acks(ackAccept, 0, 0)...))
}

// Fact 12: leaving the group (heartbeat epoch -1) with the share session
// open keeps the member's records on Apache Kafka, where it can still
// accept them; kfake releases them and closes the member's share session
// when the member leaves.
func TestShareLeaveGroupKeepsRecords(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)
	wantOffsets(t, "a", a.take(1), 0)

	wantCode(t, "leave", a.leave(), errNone)
	if c.LeaveKeepsRecords {
		idle(t, b)
		a.okAck(a.ack(acks(ackAccept, 0, 0)...))
		waitLag(t, c, group, topic, map[int32]int64{0: 0})
		return
	}
	again := b.take(1)
	if again[0].off != 0 || again[0].count != 2 {
		t.Fatalf("b after a left: got %v, want 0@0#2", again)
	}
	wantCode(t, "a's ACCEPT after leaving", a.ack(acks(ackAccept, 0, 0)...).err, errSessionNotFound)
	a.epoch = -1
	b.okAck(b.ack(acks(ackAccept, 0, 0)...))
}

// Fact 13: a member removed for missing heartbeats keeps its records on
// Apache Kafka and can still fetch and accept; its heartbeat answers
// UNKNOWN_MEMBER_ID and it rejoins with epoch 0 and the same member id.
// kfake releases its records at the session timeout.
func TestShareFencedMemberKeepsRecords(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)
	wantOffsets(t, "a", a.take(1), 0)

	a.stopHeartbeats()
	waitMemberGone(t, c, group, a.id)
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	resp, err := a.heartbeat(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "heartbeat of the removed member", resp.ErrorCode, errUnknownMember)

	if c.FencedMemberKeepsRecords {
		produceN(t, c, topic, 1, 1)
		wantOffsets(t, "removed a", a.take(1), 1)
		a.okAck(a.ack(acks(ackAccept, 0, 0, 1)...))
	} else {
		again := b.take(1)
		if again[0].off != 0 || again[0].count != 2 {
			t.Fatalf("b after a was removed: got %v, want 0@0#2", again)
		}
		b.okAck(b.ack(acks(ackAccept, 0, 0)...))
	}

	a.mu.Lock()
	a.memberEpoch = 0
	a.mu.Unlock()
	resp, err = a.heartbeat(ctx, []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "rejoin with epoch 0 and the same member id", resp.ErrorCode, errNone)
	if resp.MemberEpoch <= 0 {
		t.Fatalf("rejoined with member epoch %d", resp.MemberEpoch)
	}
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// waitMemberGone waits (bounded) until the group no longer lists member.
func waitMemberGone(t *testing.T, c *kafkatest.Cluster, group, member string) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(wireWait)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := c.Admin().DescribeShareGroups(ctx, group)
		cancel()
		if err == nil && d[group].Err == nil && !slices.ContainsFunc(d[group].Members, func(m kadm.ShareGroupMember) bool { return m.MemberID == member }) {
			t.Logf("%s: member removed %v after its last heartbeat", c.Kind, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("member %s still in group %s after %v without heartbeats", member, group, wireWait)
}

// Fact 14: when a lock runs out while the job still runs, the same member
// fetches the record again (count 2), and an ACCEPT sent for the old
// delivery lands on the new one: acks name offsets, not deliveries.
func TestShareLockExpiryRefetchSameMember(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 1)
	a := joinShare(t, c, "a", group, topic)
	first := a.take(1)
	wantOffsets(t, "a", first, 0)
	start := time.Now()
	again := a.take(1)
	if again[0].off != 0 || again[0].count != 2 {
		t.Fatalf("a after its lock ran out: got %v, want 0@0#2", again)
	}
	if waited := time.Since(start); waited < c.LockDuration-c.LockSweep-pollWait {
		t.Fatalf("redelivered %v after the first delivery, before the %v lock ran out", waited, c.LockDuration)
	}
	a.okAck(a.ack(acks(ackAccept, 0, first[0].off)...))
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}

// Fact 15: acquire mode record_limit gives at most MaxRecords;
// batch_optimized with MaxRecords 1 acquires the rest of the producer
// batch on Apache Kafka, exactly one record on kfake.
func TestShareRecordLimitMode(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	// One producer batch of 10: the linger holds the batch open until
	// every record is in it.
	p := c.Client(t, kgo.ProducerLinger(time.Second), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, 10)
	for i := range recs {
		recs[i] = rec(topic, "r"+strconv.Itoa(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	a := joinShare(t, c, "a", group, topic)

	wantOffsets(t, "a, record_limit 3", a.take(3), 0, 1, 2)
	var r fetchResult
	deadline := time.Now().Add(wireWait)
	for len(r.recs) == 0 && time.Now().Before(deadline) {
		req := a.fetchReq(1)
		req.ShareAcquireMode = batchOptimized
		r = a.sendFetch(a.cl, req)
		a.advance(r.err)
		a.okFetch(r)
	}
	if c.AcquiresWholeBatches {
		wantOffsets(t, "a, batch_optimized 1", r.recs, 3, 4, 5, 6, 7, 8, 9)
	} else {
		wantOffsets(t, "a, batch_optimized 1", r.recs, 3)
	}
	a.okAck(a.ack(ackBatch{p: 0, first: 0, last: r.recs[len(r.recs)-1].off, types: []int8{ackAccept}}))
}

// Fact 17: with no more members than partitions, members get disjoint
// partition sets covering the topic; with more members than partitions,
// the partitions are shared.
func TestShareAssignment(t *testing.T) {
	c, topic, group := protoSetup(t, 6, 0)
	a := joinShare(t, c, "a", group, topic)
	b := joinShare(t, c, "b", group, topic)
	deadline := time.Now().Add(wireWait)
	for {
		pa, pb := a.assignment(), b.assignment()
		all := slices.Sorted(slices.Values(append(slices.Clone(pa), pb...)))
		if len(pa) > 0 && len(pb) > 0 && slices.Equal(all, []int32{0, 1, 2, 3, 4, 5}) {
			t.Logf("%s: a %v, b %v", c.Kind, pa, pb)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 members on 6 partitions: a %v, b %v, want disjoint sets covering 0..5", pa, pb)
		}
		time.Sleep(50 * time.Millisecond)
	}

	one := c.Topic(t, 1)
	g := c.Group(t)
	x := joinShare(t, c, "x", g, one)
	y := joinShare(t, c, "y", g, one)
	z := joinShare(t, c, "z", g, one)
	for _, m := range []*wireMember{x, y, z} {
		if got := m.assignment(); !slices.Equal(got, []int32{0}) {
			t.Fatalf("3 members on 1 partition: %s has %v, want [0]", m.name, got)
		}
	}
}

// Transport: the broker serves one request per connection at a time. An
// ack (here a RELEASE) written while an idle long-poll waits on the same
// connection is answered, and applied, only after that poll returns: the
// poll comes back empty (the released record would wake it) and another
// member gets the record afterwards.
func TestShareIdlePollDelaysAck(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 0)
	log := &wireLog{written: make(chan struct{})}
	a := joinShare(t, c, "a", group, topic, kgo.WithHooks(log))
	b := joinShare(t, c, "b", group, topic)
	idle(t, b) // b's session is open before the records exist
	produceN(t, c, topic, 0, 1)
	wantOffsets(t, "a", a.take(1), 0)

	poll := a.fetchReq(1)
	poll.MaxWaitMillis = 1000
	a.epoch++
	log.armed.Store(true)
	polled := make(chan *kmsg.ShareFetchResponse, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), wireWait)
		defer cancel()
		resp, _ := poll.RequestWith(ctx, a.cl.Broker(int(a.broker)))
		polled <- resp
	}()
	defer wg.Wait()
	select {
	case <-log.written:
	case <-time.After(wireWait):
		t.Fatal("the poll was not written")
	}
	sent := time.Now()
	a.okAck(a.ack(acks(ackRelease, 0, 0)...))
	answered := time.Since(sent)
	resp := <-polled
	if resp == nil || resp.ErrorCode != 0 {
		t.Fatalf("the poll failed: %+v", resp)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.AcquiredRecords) != 0 {
				t.Fatalf("the poll acquired %v: the RELEASE was applied while it waited", rp.AcquiredRecords)
			}
		}
	}
	if got := log.order(); !slices.Equal(got, []int16{78, 79}) {
		t.Fatalf("responses read in order %v, want ShareFetch (78) then ShareAcknowledge (79)", got)
	}
	again := b.take(1)
	if again[0].off != 0 || again[0].count != 2 {
		t.Fatalf("b after a's RELEASE: got %v, want 0@0#2", again)
	}
	t.Logf("%s: RELEASE sent during a 1000 ms idle poll answered after %v", c.Kind, answered.Round(time.Millisecond))
	b.okAck(b.ack(acks(ackAccept, 0, 0)...))
}

// wireLog is a kgo hook that, once armed, signals the first ShareFetch
// written and records the keys of the responses read.
type wireLog struct {
	armed   atomic.Bool
	once    sync.Once
	written chan struct{}
	mu      sync.Mutex
	reads   []int16
}

func (l *wireLog) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if l.armed.Load() && key == 78 && err == nil {
		l.once.Do(func() { close(l.written) })
	}
}

func (l *wireLog) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if l.armed.Load() && (key == 78 || key == 79) && err == nil {
		l.mu.Lock()
		l.reads = append(l.reads, key)
		l.mu.Unlock()
	}
}

func (l *wireLog) order() []int16 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reads)
}

// Fact 18: a ShareAcknowledge with the member's id and its session's next
// epoch is applied when it comes on a second connection, on both brokers
// (the share session is keyed by group, member and broker).
func TestShareSecondConnectionAck(t *testing.T) {
	c, topic, group := protoSetup(t, 1, 1)
	a := joinShare(t, c, "a", group, topic)
	wantOffsets(t, "a", a.take(1), 0)
	other := c.Client(t)

	r := a.sendAck(other, a.ackReq(false, acks(ackAccept, 0, 0)...))
	a.okAck(r)
	a.advance(r.err)
	a.okAck(a.ack()) // the session goes on at the next epoch
	waitLag(t, c, group, topic, map[int32]int64{0: 0})
}
