package member

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// AckType is a terminal acknowledgement (Kafka's AcknowledgeType codes).
type AckType int8

const (
	// Accept: the record is done; the broker will not deliver it again.
	Accept AckType = 1
	// Release: deliver the record again, with its delivery count + 1.
	Release AckType = 2
	// Reject: the record can never be processed; the broker archives it.
	Reject AckType = 3
)

func (a AckType) String() string {
	switch a {
	case Accept:
		return "accept"
	case Release:
		return "release"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("AckType(%d)", int8(a))
}

// Key names a record. Acknowledgements name records by offset, not by
// delivery: a record whose lock ran out and that this member fetched again
// has the same Key, and an acknowledgement lands on its newest delivery.
type Key struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (k Key) String() string { return fmt.Sprintf("%s/%d@%d", k.Topic, k.Partition, k.Offset) }

// Delivery is one acquired record handed to the executor.
type Delivery struct {
	// Record is the decoded record: Topic, Partition, Offset, Key, Value,
	// Headers and Timestamp are set.
	Record *kgo.Record
	// Count is the broker's delivery count (1 on the first delivery).
	Count int32
	// Deadline is when the lock runs out, as this member computes it: the
	// time the fetch was sent plus the lock duration the broker reported,
	// so it is never later than the broker's.
	Deadline time.Time
	// Lock is the acquisition lock duration the broker reported
	// (AcquisitionLockTimeoutMillis): what a renewal buys.
	Lock time.Duration
}

// Key returns the delivery's record key.
func (d Delivery) Key() Key {
	return Key{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset}
}

// Renewal is the outcome of one record's [Member.Renew].
type Renewal struct {
	Key Key
	// Deadline is the lock's new deadline (send time plus the lock the
	// broker reported) when Err is nil.
	Deadline time.Time
	// Err says why the broker did not renew the lock.
	Err error
}

// AckResult is the outcome of one record's terminal acknowledgement.
type AckResult struct {
	Key  Key
	Type AckType
	// Err is nil when the broker applied the acknowledgement. An ack for
	// a record whose lock the member had lost (see [Event.Lost]) is not
	// sent; its Err is [ErrNotHeld].
	Err error
}

// Event is what the member reports to the executor, in batches. Within
// one Event, Lost is applied before Deliveries: a key in both was lost and
// then fetched again.
type Event struct {
	// Deliveries are newly acquired records, each using one granted
	// credit, past the credit if a fetch acquired more (see
	// [Member.Grant]). A key may be delivered again while its first
	// delivery is still held (its lock ran out and this member fetched
	// it again); the member then holds only the newest delivery.
	Deliveries []Delivery
	// Renewals answer [Member.Renew], one per key asked for.
	Renewals []Renewal
	// Acked answers [Member.Ack], one per acknowledgement.
	Acked []AckResult
	// Lost are held records whose locks the member lost (the broker
	// closed the session, the connection died, the partition moved and
	// its session could not be resumed): another member may get them.
	// Their jobs may finish, but their acknowledgements are not sent.
	Lost []Key
}

// State is the member's place in the group.
type State int8

const (
	// Joining: no assignment yet (first join, or rejoining after being
	// fenced). The member fetches nothing while not joined, but keeps
	// acknowledging and renewing what it holds.
	Joining State = iota
	// Joined: the member has an assignment and fetches.
	Joined
	// Fenced: the coordinator no longer knows the member (missed
	// heartbeats, UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH); it rejoins.
	Fenced
	// Left: the member left the group ([Member.Leave] or Run's end).
	Left
)

func (s State) String() string {
	switch s {
	case Joining:
		return "joining"
	case Joined:
		return "joined"
	case Fenced:
		return "fenced"
	case Left:
		return "left"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// Stats is a snapshot of the member, for metrics and the executor's
// prefetch. Counters only grow.
type Stats struct {
	MemberID string
	State    State
	// Epoch is the member epoch the coordinator last gave.
	Epoch int32
	// Partitions is the number of partitions assigned.
	Partitions int
	// Held is the number of records acquired and not yet acknowledged.
	Held int
	// HeldBytes is the bytes (key, value and headers) of the records in
	// hand: delivered and their job not ended (no terminal ack queued);
	// within Config.MaxBytes plus one fetch's overshoot (bytes.go).
	HeldBytes int64
	// Credit is the number of records the member may still fetch; below
	// 0, the records delivered past the credit not yet repaid by grants.
	Credit int
	// FetchRTT is a moving average of the round trip of ShareFetch
	// requests that returned records (long polls that waited for records
	// are not counted); 0 before the first.
	FetchRTT time.Duration
	// WholeBatches is the credit at which every fetch covers the largest
	// producer batch of the partitions it fetches, as their latest
	// responses showed (so it is batch_optimized, acquire.go): that batch
	// times the sessions that fetch; 0 before any batch was seen. With
	// less credit, fetches are record_limit and split producer batches,
	// which costs the broker a read of the whole batch each time.
	WholeBatches int
	// Fetchers is the number of share sessions that fetch records (one
	// per broker leading a wanted partition); the credit is shared among
	// them.
	Fetchers int

	Fetches         int64 // ShareFetch requests answered
	Fetched         int64 // records acquired
	Acks            map[AckType]int64
	AckErrors       int64 // acknowledgements the broker did not apply
	Renewals        int64
	RenewErrors     int64
	LostRecords     int64 // records reported in Event.Lost
	SessionsOpened  int64 // share sessions opened (epoch 0), first ones included
	SessionsReset   int64 // sessions reopened after an error
	Rejoins         int64 // times the member rejoined after being fenced
	HeartbeatErrors int64

	// BatchFetches are the fetches sent in batch_optimized mode
	// (acquire.go); the others were record_limit.
	BatchFetches int64
	// OverCredit counts the records fetches delivered past the credit
	// they asked for (whole producer batches, batch_optimized).
	OverCredit int64
	// Reacquired counts the records the broker gave again to the session
	// holding their queued terminal ack (their lock ran out before it
	// went): not delivered again, the queued ack answers for them.
	Reacquired int64
	// BatchesDecoded counts the producer batches decompressed and
	// decoded (decode.go): about one per batch acquired when the
	// decoded batches are reused, more when records come back.
	BatchesDecoded int64
	// DecodedKept and DecodedKeptBytes are the decoded batches the member
	// keeps for records of them that may be acquired again (decode.go),
	// and their size (the records decoded: their bytes and kgo.Records).
	DecodedKept      int
	DecodedKeptBytes int64
}
