package handler

import (
	"strconv"
	"time"
)

// JobIDHeader is the record header a producer sets to give a job a stable
// identity. [Job.ID] returns its value when present. A producer that retries
// a send can write the same job twice; both copies carry the same job ID, so
// idempotency keyed on it runs the job once.
const JobIDHeader = "shareq-job-id"

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// Job is one record delivered to a handler. The worker fills it from the
// Kafka record; handlers must treat its fields as read-only. A Job is not
// safe for concurrent mutation of its fields, but concurrent reads are
// fine; [Job.SetResult] and [Job.Progress] are safe beside them.
type Job struct {
	// Topic, Partition and Offset locate the record.
	Topic     string
	Partition int32
	Offset    int64

	// Key, Value and Headers are the record's payload. Value may be empty.
	Key     []byte
	Value   []byte
	Headers []Header

	// Timestamp is the record's timestamp as set by the producer or broker.
	Timestamp time.Time

	// Group is the share group the job was delivered through.
	Group string

	// DeliveryCount is 1 on the first delivery and rises by one each time
	// the broker delivers the record again (after a RELEASE, a lock
	// expiry or a member's death).
	DeliveryCount int32

	// DeliveryLimit is the group's delivery count limit as known to the
	// worker (0 when unknown). On the delivery whose count reaches it, a
	// failure that is released is archived by the broker and not
	// delivered again.
	DeliveryLimit int32

	// LockDeadline is when the broker's lock on the record runs out unless
	// it is renewed. The worker renews the lock of a job that runs long;
	// LockDeadline is the deadline at delivery and is not updated.
	LockDeadline time.Time

	// out is the result and progress the handler reported.
	out output
}

// ID returns the job's stable identity: the value of the [JobIDHeader]
// header when the producer set one, else "topic/partition/offset". The
// second form is unique per record but not per job: a producer retry that
// writes the job twice yields two IDs.
func (j *Job) ID() string {
	if v, ok := j.Header(JobIDHeader); ok && len(v) > 0 {
		return string(v)
	}
	return j.Topic + "/" + strconv.FormatInt(int64(j.Partition), 10) + "/" + strconv.FormatInt(j.Offset, 10)
}

// Header returns the value of the last header named key, and whether there
// is one.
func (j *Job) Header(key string) ([]byte, bool) {
	for i := len(j.Headers) - 1; i >= 0; i-- {
		if j.Headers[i].Key == key {
			return j.Headers[i].Value, true
		}
	}
	return nil, false
}

// LastDelivery reports whether this delivery is the last one the broker
// will make: DeliveryLimit is known and DeliveryCount has reached it.
func (j *Job) LastDelivery() bool {
	return j.DeliveryLimit > 0 && j.DeliveryCount >= j.DeliveryLimit
}
