package worker

import (
	"time"

	"github.com/shareq/shareq/handler"
)

// Ack is the acknowledgement the worker sends for a record.
type Ack int8

const (
	// AckAccept: the job is done; the broker will not deliver it again.
	AckAccept Ack = iota + 1
	// AckRelease: deliver the record again (to any member), counting one
	// more delivery.
	AckRelease
	// AckReject: the job can never succeed; the broker archives it.
	AckReject
)

func (a Ack) String() string {
	switch a {
	case AckAccept:
		return "accept"
	case AckRelease:
		return "release"
	case AckReject:
		return "reject"
	}
	return "unknown"
}

// Outcome is how one delivery of a job ended, as the worker reports it in
// [Result], its log and (through the metrics package) the
// shareq_jobs_total{outcome} counter. The acknowledgement the broker got
// is reported apart, in [Result.Ack]: a parked job and a job that
// succeeded are both ACCEPTed.
type Outcome int8

const (
	// OutcomeSucceeded: the handler returned nil; ACCEPT.
	OutcomeSucceeded Outcome = iota + 1
	// OutcomeParked: the handler failed and a dead-letter middleware (the
	// dlq package) parked the job ([handler.ParkedError]); ACCEPT. Never
	// counted as a success.
	OutcomeParked
	// OutcomeRetried: the handler failed with a retryable error (a
	// [Timeout] included) before the last delivery; RELEASE, after the
	// retry backoff, for another delivery.
	OutcomeRetried
	// OutcomeDiscarded: the job will not run again and was not parked:
	// a permanent failure without a DLQ (REJECT, the broker archives the
	// record), or a RELEASE on the last delivery (the broker archives it).
	OutcomeDiscarded
	// OutcomeInterrupted: the worker gave the record back without a
	// handler result, before the last delivery: its lock ran out before
	// the job started ([ErrLockExpired]) or while it ran ([ErrLockLost]),
	// it reached [MaxHold], or the worker stopped ([ErrShutdown]). The
	// record is delivered again. Also a job whose handler returned after
	// its lock ran out or after the worker may have been dropped from the
	// group ([ErrLockLost], Ack the ACCEPT or REJECT sent all the same):
	// the broker most likely refuses it and delivers the record again.
	OutcomeInterrupted
	// OutcomeCancelled: the job was cancelled after it was produced
	// (pgoutbox.CancelTx with pgoutbox.ClaimKey) and the idempotency
	// middleware found the cancel in its claim table
	// ([handler.CancelledError]): the handler did not run; ACCEPT. Never
	// counted as a success. [Result.Ran] is true and Duration is set:
	// the handler chain ran, up to the claim.
	OutcomeCancelled
	// OutcomeSnoozed: the handler snoozed the job ([handler.Snooze]) for
	// longer than the worker holds it, or the job waited for its key
	// until [MaxHold]: a copy of the job to run later was written (to
	// its topic, or to the [Snoozer]) and the record ACCEPTed. No
	// delivery was spent: the copy's first delivery runs the job.
	OutcomeSnoozed

	// outcomeEnd is one past the last outcome: the size of a count by
	// Outcome (the executor's).
	outcomeEnd
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeParked:
		return "parked"
	case OutcomeRetried:
		return "retried"
	case OutcomeDiscarded:
		return "discarded"
	case OutcomeInterrupted:
		return "interrupted"
	case OutcomeCancelled:
		return "cancelled"
	case OutcomeSnoozed:
		return "snoozed"
	}
	return "unknown"
}

// Outcomes lists every [Outcome], for code that wants a series per outcome
// (the metrics package pre-creates them).
func Outcomes() []Outcome {
	return []Outcome{OutcomeSucceeded, OutcomeParked, OutcomeRetried, OutcomeDiscarded, OutcomeInterrupted, OutcomeCancelled, OutcomeSnoozed}
}

// Result describes how a job ended, as passed to [Observer.JobFinished].
type Result struct {
	// Outcome is how the delivery ended: succeeded, parked, retried,
	// discarded, interrupted, cancelled or snoozed.
	Outcome Outcome
	// Ack is the acknowledgement sent for the record. OutcomeSucceeded,
	// OutcomeParked, OutcomeCancelled and OutcomeSnoozed are all
	// AckAccept.
	Ack Ack
	// Err is the handler's error (nil when it succeeded; for a parked job,
	// the failure it was parked for), or the reason the worker
	// acknowledged the record without a handler result: [ErrLockExpired],
	// [ErrLockLost], [ErrMaxHold], [ErrShutdown]; with a job timeout,
	// an error that wraps [ErrJobTimeout].
	Err error
	// Parked says where and why the job was parked, for OutcomeParked;
	// nil otherwise.
	Parked *handler.DeadLetter
	// Ran reports whether a handler ran. A job whose lock ran out before
	// it could start is released without running, unless it is on its
	// last delivery.
	Ran bool
	// Duration is how long the handler ran (0 when it did not).
	Duration time.Duration
	// LockLeft is the time left on the record's lock when it was
	// acknowledged; negative when the lock had run out.
	LockLeft time.Duration
	// Final reports whether the broker will not deliver the record again:
	// it was accepted or rejected, or released on its last delivery (the
	// broker archives it).
	Final bool
}

// Observer receives the worker's events, for metrics. Methods are called
// from the worker's goroutines, concurrently; they must be safe for
// concurrent use and return quickly.
type Observer interface {
	// JobStarted is called when a handler starts on a job. A job held
	// through a pause (a dependency was down) and run again on the same
	// delivery is the same job: JobStarted is not called again.
	JobStarted(job *handler.Job)
	// JobFinished is called once per job, with the acknowledgement the
	// worker sends for it. A record delivered again while its job is
	// still in hand (its lock ran out and this worker fetched it again)
	// is the same job: the job's outcome answers both deliveries.
	JobFinished(job *handler.Job, res Result)
	// LockRenewed is called after each renewal of a running job's lock;
	// err is non-nil when the broker did not confirm it.
	LockRenewed(job *handler.Job, err error)
	// AckFailed is called for each acknowledgement the broker did not
	// apply (the record's lock had run out, or its session was gone): the
	// record will be delivered again, and its job may run again.
	AckFailed(topic string, partition int32, err error)
}

// TopicObserver is an optional extension of [Observer]: an observer that
// also implements it hears what the worker's watch on its topics finds
// (every 10 s). metrics.Metrics implements it.
type TopicObserver interface {
	// TopicMissing is called when a topic the worker consumes is found
	// deleted (missing true), and when it is found again (false).
	TopicMissing(topic string, missing bool)
	// TopicRecreated is called when a topic the worker consumes is found
	// under a new topic ID: it was deleted and re-created, and the worker
	// consumes the new one from then on.
	TopicRecreated(topic string)
}

// GrowthObserver is an optional extension of [Observer]: an observer that
// also implements it hears when the worker finds that its share group
// started a partition added to a handled topic past the partition's first
// record, on Apache Kafka before 4.4 with share.auto.offset.reset=latest
// (KAFKA-20742): up to records records written to it before the group
// started it may never have been delivered ("up to": records done before
// the worker looked count too). The worker logs the same at Error level,
// with what to do. metrics.Metrics
// implements it.
type GrowthObserver interface {
	PartitionSkipped(topic string, partition int32, records int64)
}

// StallObserver is an optional extension of [Observer]: an observer that
// also implements it hears when the worker finds a partition assigned to
// it stalled (stalled true): records wait, and the broker gives it none of
// them because the group's start offset on the partition does not move
// and the records from it reach the in-flight limit
// (share.partition.max.record.locks); and when the partition moves again
// (false). The worker logs the same, with what to do. metrics.Metrics
// implements it.
type StallObserver interface {
	PartitionStalled(topic string, partition int32, stalled bool)
}

// PauseObserver is an optional extension of [Observer]: an observer that
// also implements it hears when the worker pauses because a dependency
// every job needs is down (a handler returned [handler.Unavailable]) and
// when it resumes. metrics.Metrics implements it.
type PauseObserver interface {
	// WorkerPaused is called when the worker pauses because dependency
	// is down (err is the handler's error that said so), and once more
	// for each other dependency that goes down while it is paused.
	WorkerPaused(dependency string, err error)
	// WorkerResumed is called once for each dependency WorkerPaused
	// named, when the pause ends: back is true when a probe got through
	// and the worker runs again, false when the worker stopped while
	// paused. down is how long the pause lasted.
	WorkerResumed(dependency string, down time.Duration, back bool)
}

// KeyObserver is an optional extension of [Observer]: an observer that
// also implements it hears when a key's breaker opens ([KeyLimit],
// [handler.KeyUnavailable]) and when it closes. Called on the worker's
// loop: return at once. metrics.Metrics implements it.
type KeyObserver interface {
	// KeyDown is called when the breaker of key (of topic) opens; err is
	// the handler's error that opened it.
	KeyDown(topic, key string, err error)
	// KeyBack is called when a probe gets through and the breaker of key
	// closes, down after it opened.
	KeyBack(topic, key string, down time.Duration)
}

// MemberObserver is an optional extension of [Observer]: an observer that
// also implements it gets a snapshot of the worker's share-group member
// about once a second while Run runs, and a last one when it stops.
// metrics.Metrics implements it.
type MemberObserver interface {
	MemberStats(s MemberStats)
}

// MemberStats is a snapshot of a worker's share-group member: its place in
// the group, the records it holds, and counters since Run started (they
// only grow).
type MemberStats struct {
	// ClientID is the Kafka client ID the member connects with (shareq
	// status shows it per member).
	ClientID string
	// MemberID is the member's ID in the share group.
	MemberID string
	// State is "joining", "joined", "fenced" (rejoining after the
	// coordinator dropped the member) or "left".
	State string
	// Partitions is the number of partitions assigned to the member.
	Partitions int
	// Held is the number of records the member holds: acquired and not
	// yet acknowledged (running, waiting for a handler, or held for a
	// retry backoff).
	Held int
	// HeldBytes is the bytes (keys, values and headers) of the records
	// whose jobs have not ended: within [MaxBytesInHand] plus one fetch's
	// overshoot.
	HeldBytes int64
	// Buffered is the number of records fetched ahead of free handler
	// slots, waiting for one (the prefetch).
	Buffered int
	// Running is the number of handlers running.
	Running int
	// Waiting is the number of jobs waiting for their keys' limits or
	// breakers ([KeyLimit]), without a handler slot.
	Waiting int
	// Snoozed is the number of snoozed jobs held until they are due.
	Snoozed int
	// Paused is the number of jobs in hand waiting for their topic's
	// pause to end ([Worker.PausedTopics]), without a handler slot.
	Paused int
	// BreakersOpen is the number of keys whose breaker is open.
	BreakersOpen int
	// FetchRTT is a moving average of the round trip of share fetches
	// that returned records.
	FetchRTT time.Duration

	Fetches int64 // share fetches answered
	// WholeBatchFetches counts the share fetches that took whole producer
	// batches (Kafka's batch_optimized acquire mode); the others took
	// records of batches one by one (record_limit), which costs the
	// broker a read of each batch they touch, every time.
	WholeBatchFetches int64
	Fetched           int64         // records acquired
	Acks              map[Ack]int64 // acknowledgements the broker applied, by type
	AckErrors         int64         // acknowledgements the broker did not apply
	LostRecords       int64         // held records whose lock was lost (session or connection gone)
	SessionsOpened    int64         // share sessions opened, first ones included
	SessionsReset     int64         // share sessions reopened after an error
	Rejoins           int64         // times the member rejoined the group after being fenced

	// RateTopic is the topic of the worker's [TopicRate] ("" without
	// one), RateLimit its limit for the whole fleet and RateShare this
	// worker's share of it, both in jobs per second (RateShare is 0 while
	// the worker waits to be counted among the members sharing it).
	RateTopic            string
	RateLimit, RateShare float64
}

// NopObserver does nothing. Embed it in an observer that needs only some
// of the events.
type NopObserver struct{}

func (NopObserver) JobStarted(*handler.Job)          {}
func (NopObserver) JobFinished(*handler.Job, Result) {}
func (NopObserver) LockRenewed(*handler.Job, error)  {}
func (NopObserver) AckFailed(string, int32, error)   {}

var (
	_ Observer       = NopObserver{}
	_ TopicObserver  = multiObserver(nil)
	_ MemberObserver = multiObserver(nil)
	_ PauseObserver  = multiObserver(nil)
	_ KeyObserver    = multiObserver(nil)
	_ GrowthObserver = multiObserver(nil)
	_ StallObserver  = multiObserver(nil)

	_ StallHealObserver = multiObserver(nil)

	_ PausedTopicObserver = multiObserver(nil)
)

// multiObserver passes every event to each observer in turn.
type multiObserver []Observer

func (m multiObserver) JobStarted(j *handler.Job) {
	for _, o := range m {
		o.JobStarted(j)
	}
}

func (m multiObserver) JobFinished(j *handler.Job, r Result) {
	for _, o := range m {
		o.JobFinished(j, r)
	}
}

func (m multiObserver) LockRenewed(j *handler.Job, err error) {
	for _, o := range m {
		o.LockRenewed(j, err)
	}
}

func (m multiObserver) AckFailed(topic string, partition int32, err error) {
	for _, o := range m {
		o.AckFailed(topic, partition, err)
	}
}

func (m multiObserver) TopicMissing(topic string, missing bool) {
	for _, o := range m {
		if to, ok := o.(TopicObserver); ok {
			to.TopicMissing(topic, missing)
		}
	}
}

func (m multiObserver) TopicRecreated(topic string) {
	for _, o := range m {
		if to, ok := o.(TopicObserver); ok {
			to.TopicRecreated(topic)
		}
	}
}

func (m multiObserver) PartitionSkipped(topic string, partition int32, records int64) {
	for _, o := range m {
		if g, ok := o.(GrowthObserver); ok {
			g.PartitionSkipped(topic, partition, records)
		}
	}
}

func (m multiObserver) PartitionStalled(topic string, partition int32, stalled bool) {
	for _, o := range m {
		if g, ok := o.(StallObserver); ok {
			g.PartitionStalled(topic, partition, stalled)
		}
	}
}

func (m multiObserver) StallHealed(topic string, partition int32, result string) {
	for _, o := range m {
		if h, ok := o.(StallHealObserver); ok {
			h.StallHealed(topic, partition, result)
		}
	}
}

func (m multiObserver) MemberStats(s MemberStats) {
	for _, o := range m {
		if mo, ok := o.(MemberObserver); ok {
			mo.MemberStats(s)
		}
	}
}

func (m multiObserver) KeyDown(topic, key string, err error) {
	for _, o := range m {
		if ko, ok := o.(KeyObserver); ok {
			ko.KeyDown(topic, key, err)
		}
	}
}

func (m multiObserver) KeyBack(topic, key string, down time.Duration) {
	for _, o := range m {
		if ko, ok := o.(KeyObserver); ok {
			ko.KeyBack(topic, key, down)
		}
	}
}

func (m multiObserver) WorkerPaused(dependency string, err error) {
	for _, o := range m {
		if po, ok := o.(PauseObserver); ok {
			po.WorkerPaused(dependency, err)
		}
	}
}

func (m multiObserver) WorkerResumed(dependency string, down time.Duration, back bool) {
	for _, o := range m {
		if po, ok := o.(PauseObserver); ok {
			po.WorkerResumed(dependency, down, back)
		}
	}
}

func (m multiObserver) TopicPaused(topic, reason, by string) {
	for _, o := range m {
		if po, ok := o.(PausedTopicObserver); ok {
			po.TopicPaused(topic, reason, by)
		}
	}
}

func (m multiObserver) TopicResumed(topic string, paused time.Duration) {
	for _, o := range m {
		if po, ok := o.(PausedTopicObserver); ok {
			po.TopicResumed(topic, paused)
		}
	}
}
