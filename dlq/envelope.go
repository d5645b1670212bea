package dlq

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// Header names of the DLQ envelope. [Middleware] adds them to every parked
// record, after the job's own headers; [Parse] reads them back. Values are
// plain UTF-8 text (numbers in decimal, times in RFC 3339 with nanoseconds,
// UTC) so console tools such as kcat show them as they are.
const (
	// HeaderPrefix starts the name of every envelope header. Replay strips
	// headers with this prefix before it re-produces a job.
	HeaderPrefix = "shareq-dlq-"

	// HeaderVersion is the envelope format version, "1".
	HeaderVersion = HeaderPrefix + "version"
	// HeaderReason is why the job was parked: the Reason of its
	// [handler.PermanentError] ("permanent", "decode", "panic", or the
	// caller's own), or "delivery-limit" when it failed with a retryable
	// error on its last delivery. Required by [Parse].
	HeaderReason = HeaderPrefix + "reason"
	// HeaderError is the text of the handler's error, after the [Redact]
	// function if one is set, truncated to [MaxErrorLength].
	HeaderError = HeaderPrefix + "error"
	// HeaderStack is the stack of a panicking handler (from a
	// [handler.PanicError] in the error chain), truncated to
	// [MaxStackLength]. Absent when the handler did not panic.
	HeaderStack = HeaderPrefix + "stack"
	// HeaderDeliveryCount is the delivery count of the attempt that was
	// parked.
	HeaderDeliveryCount = HeaderPrefix + "delivery-count"
	// HeaderSourceTopic is the topic the job came from; Replay produces to
	// it. Required by [Parse].
	HeaderSourceTopic = HeaderPrefix + "source-topic"
	// HeaderSourcePartition is the partition the job came from. Required
	// by [Parse].
	HeaderSourcePartition = HeaderPrefix + "source-partition"
	// HeaderSourceOffset is the offset of the job's record in its source
	// partition. Required by [Parse].
	HeaderSourceOffset = HeaderPrefix + "source-offset"
	// HeaderGroup is the share group that delivered the job (absent when
	// the worker did not say).
	HeaderGroup = HeaderPrefix + "group"
	// HeaderEnqueuedAt is the source record's timestamp: when the job was
	// produced (or appended, for topics with log-append time).
	HeaderEnqueuedAt = HeaderPrefix + "enqueued-at"
	// HeaderFirstAttemptAt is the best known start of the job's first
	// failing attempt; see [Envelope.FirstAttemptAt] for exactly what it
	// means.
	HeaderFirstAttemptAt = HeaderPrefix + "first-attempt-at"
	// HeaderLastAttemptAt is when the attempt that was parked ended.
	HeaderLastAttemptAt = HeaderPrefix + "last-attempt-at"
	// HeaderWorkerHost is the host name of the worker that parked the job.
	HeaderWorkerHost = HeaderPrefix + "worker-host"
	// HeaderParkedAt is when the worker built the DLQ record, just before
	// producing it.
	HeaderParkedAt = HeaderPrefix + "parked-at"

	// HeaderValueOmitted marks a DLQ record that carries the job without
	// its value: the record with the value was too large for the DLQ
	// topic (MESSAGE_TOO_LARGE). Its value is the size in bytes of the
	// value left out. The value stays in the source record (see the
	// source headers) until the source topic's retention deletes it;
	// [Replay] reads it from there.
	HeaderValueOmitted = HeaderPrefix + "value-omitted"

	// HeaderReplayedFrom is added by [Replay] to a job it re-produces:
	// "dlqtopic/partition/offset" of the DLQ record it came from. It is
	// not an envelope header: it stays with the job, so a job that is
	// parked again shows where its last replay came from.
	HeaderReplayedFrom = "shareq-replayed-from"
)

// Headers of the dead-letter records the broker itself writes (Apache
// Kafka 4.4+, KIP-1191) to a share group's dead-letter topic (see
// worker.BrokerDLQ) for every record the group archives. [Parse] reads
// them into an [Envelope] with Broker set.
const (
	// BrokerHeaderPrefix starts the name of every broker DLQ header.
	BrokerHeaderPrefix = "__dlq.errors."
	// BrokerHeaderTopic, BrokerHeaderPartition and BrokerHeaderOffset
	// locate the archived record.
	BrokerHeaderTopic     = BrokerHeaderPrefix + "topic"
	BrokerHeaderPartition = BrokerHeaderPrefix + "partition"
	BrokerHeaderOffset    = BrokerHeaderPrefix + "offset"
	// BrokerHeaderGroup is the share group that archived it.
	BrokerHeaderGroup = BrokerHeaderPrefix + "group"
	// BrokerHeaderDeliveryCount is its delivery count when archived.
	BrokerHeaderDeliveryCount = BrokerHeaderPrefix + "delivery.count"
	// BrokerHeaderMessage says why: [BrokerMessageRejected] or
	// [BrokerMessageDeliveryLimit] on Kafka 4.4.
	BrokerHeaderMessage = BrokerHeaderPrefix + "message"

	// BrokerMessageRejected is the broker's message for a record a
	// consumer REJECTed.
	BrokerMessageRejected = "Offset rejected by client."
	// BrokerMessageDeliveryLimit is the broker's message for a record
	// whose last delivery ended without an ACCEPT or REJECT: released,
	// or its lock ran out (a worker killed during its last delivery).
	BrokerMessageDeliveryLimit = "Offset delivery count exceeded the threshold."
)

// Reasons [Parse] gives broker dead-letter records. A record past the
// delivery limit gets [handler.ReasonDeliveryLimit], like one the
// middleware parked on its last delivery.
const (
	// ReasonBrokerRejected: a worker REJECTed the record (a permanent
	// failure with no dlq middleware to park it).
	ReasonBrokerRejected = "rejected"
	// ReasonBroker: a broker message this package does not know.
	ReasonBroker = "broker"
)

// envelopeVersion is the value of HeaderVersion this package writes and reads.
const envelopeVersion = "1"

// ErrMalformed is returned (wrapped) by [Parse] and [ParseHeaders] when a
// record is not a DLQ envelope this package can read: a required header is
// missing, or a header's value does not parse.
var ErrMalformed = errors.New("dlq: malformed DLQ record")

// Envelope is the DLQ metadata of a parked job, carried in the
// shareq-dlq-* headers (see the Header constants).
type Envelope struct {
	// Reason is why the job was parked (see [HeaderReason]).
	Reason string
	// Error is the handler's error text, possibly redacted and truncated.
	Error string
	// Stack is the panic stack, or "" when the handler did not panic.
	Stack string
	// DeliveryCount is the delivery count of the parked attempt (0 when
	// the header is absent).
	DeliveryCount int32
	// SourceTopic, SourcePartition and SourceOffset locate the job's
	// original record.
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	// Group is the share group that delivered the job, or "".
	Group string
	// EnqueuedAt is the source record's timestamp (zero when unknown).
	EnqueuedAt time.Time
	// FirstAttemptAt is the start of the earliest failing attempt the
	// parking worker knew of. It is exact when the parked attempt was the
	// first delivery, or when the same worker process saw the job fail
	// earlier and still remembered it (see [TrackFirstAttempts]).
	// Otherwise the worker cannot see earlier deliveries, made by other
	// members or before a restart, and FirstAttemptAt is EnqueuedAt: a
	// lower bound, not an attempt time.
	FirstAttemptAt time.Time
	// LastAttemptAt is when the parked attempt ended.
	LastAttemptAt time.Time
	// WorkerHost is the host name of the worker that parked the job.
	WorkerHost string
	// ParkedAt is when the DLQ record was built.
	ParkedAt time.Time
	// ValueOmitted reports that the job was parked without its value,
	// which was too large for the DLQ topic (see [HeaderValueOmitted]);
	// OmittedValueSize is the size of the value left out.
	ValueOmitted     bool
	OmittedValueSize int

	// Broker reports a dead-letter record written by the broker (Kafka
	// 4.4+, the __dlq.errors.* headers) rather than by [Middleware]:
	// Reason is [ReasonBrokerRejected], [handler.ReasonDeliveryLimit] or
	// [ReasonBroker], Error the broker's message, ParkedAt the DLQ
	// record's timestamp; the worker-side fields (Stack, EnqueuedAt, the
	// attempt times, WorkerHost) are zero. The broker does not copy the
	// job's headers (so not its job ID either), and copies its key and
	// value only when the group sets
	// errors.deadletterqueue.copy.record.enable (the worker does): [Get]
	// and [Replay] read the job's own record back from its source topic
	// while that still holds it (Restored).
	Broker bool
	// Restored reports that the job's key, value and headers were read
	// back from its source record ([Get], [Replay], and [List], which
	// reads the source records of a page together).
	Restored bool
}

// Parked is a record read from a DLQ topic: its envelope, where it sits in
// the DLQ topic, and the job's own key, value and headers.
type Parked struct {
	Envelope

	// Topic, Partition and Offset locate the DLQ record.
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the DLQ record's timestamp.
	Timestamp time.Time

	// Key and Value are the job's key and value. [List] keeps only the
	// first [PreviewBytes] of Value; ValueSize is always the full size.
	// A job parked without its value (ValueOmitted) has no Value here,
	// and ValueSize is the size of the value left out.
	Key       []byte
	Value     []byte
	ValueSize int
	// Headers are the job's own headers, in order, without the envelope
	// (shareq-dlq-*) headers.
	Headers []kgo.RecordHeader

	// Replays are the replays of this record that its replay markers
	// record (see [HeaderReplayedOffset]), oldest first; empty when it
	// was never replayed. [List], [Get] and [Replay] fill it in; [Parse]
	// cannot (the markers come after the record).
	Replays []ReplayMark

	// Err is set by [List] on a record of the DLQ topic that is not a DLQ
	// envelope (wrapping [ErrMalformed]); only the DLQ location, Key,
	// Value and Headers are then filled in. [Parse] returns such an error
	// instead.
	Err error
}

// Replayed reports whether the job was replayed (it has replay markers).
func (p *Parked) Replayed() bool { return len(p.Replays) > 0 }

// LastReplay returns the latest replay of the job, if it was replayed.
func (p *Parked) LastReplay() (ReplayMark, bool) {
	if len(p.Replays) == 0 {
		return ReplayMark{}, false
	}
	return p.Replays[len(p.Replays)-1], true
}

// JobIDKnown reports whether [Parked.JobID] is the job's real ID. It is
// false only for a record the broker wrote (Envelope.Broker) whose source
// record could not be read back (not Restored): the broker keeps no
// headers, so the job's own shareq-job-id, if it had one, is lost, and
// JobID returns the source location, which is the job's ID only when the
// producer gave it none.
func (p *Parked) JobIDKnown() bool { return !p.Broker || p.Restored }

// JobID returns the parked job's identity as [handler.Job.ID] computed it:
// its [handler.JobIDHeader] header when present, else
// "sourcetopic/partition/offset". Replay gives the re-produced job this ID.
func (p *Parked) JobID() string {
	for i := len(p.Headers) - 1; i >= 0; i-- {
		if p.Headers[i].Key == handler.JobIDHeader && len(p.Headers[i].Value) > 0 {
			return string(p.Headers[i].Value)
		}
	}
	return sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset)
}

// Location returns "topic/partition/offset" of the DLQ record, the form of
// the [HeaderReplayedFrom] header.
func (p *Parked) Location() string {
	return sourceID(p.Topic, p.Partition, p.Offset)
}

func sourceID(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}

// Parse decodes a record read from a DLQ topic: one [Middleware] parked,
// or one the broker wrote to a share group's dead-letter topic (Envelope.
// Broker). It returns an error wrapping [ErrMarker] for a replay marker
// (not a job: pass it over), and one wrapping [ErrMalformed] when the
// record is neither.
func Parse(r *kgo.Record) (Parked, error) {
	if r == nil {
		return Parked{}, fmt.Errorf("%w: nil record", ErrMalformed)
	}
	if IsMarker(r) {
		return Parked{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp},
			fmt.Errorf("dlq: record %s: %w", sourceID(r.Topic, r.Partition, r.Offset), ErrMarker)
	}
	p := Parked{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Timestamp: r.Timestamp,
		Key:       r.Key,
		Value:     r.Value,
		ValueSize: len(r.Value),
		Headers:   jobHeaders(r.Headers),
	}
	if isBrokerRecord(r.Headers) {
		env, err := parseBrokerHeaders(r.Headers)
		if err != nil {
			return p, fmt.Errorf("dlq: record %s: %w", p.Location(), err)
		}
		env.ParkedAt = r.Timestamp
		p.Envelope = env
		p.Headers = nil // only the broker's own headers
		return p, nil
	}
	env, err := ParseHeaders(r.Headers)
	if err != nil {
		return p, fmt.Errorf("dlq: record %s: %w", p.Location(), err)
	}
	p.Envelope = env
	if env.ValueOmitted {
		p.ValueSize = env.OmittedValueSize
	}
	return p, nil
}

// ParseHeaders decodes the envelope headers among hs; other headers are
// ignored. When a header appears more than once the last one counts. The
// reason and source headers are required; the others may be absent but
// must parse when present.
func ParseHeaders(hs []kgo.RecordHeader) (Envelope, error) {
	var (
		env  Envelope
		seen = map[string]bool{}
		errs []error
	)
	bad := func(name, value string, err error) {
		errs = append(errs, fmt.Errorf("%w: header %s: %q: %v", ErrMalformed, name, clip(value, 64), err))
	}
	count := func(name, value string, bits int) int64 {
		n, err := parseCount(value, bits)
		if err != nil {
			bad(name, value, err)
		}
		return n
	}
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, HeaderPrefix) {
			continue
		}
		v := string(h.Value)
		seen[h.Key] = true
		switch h.Key {
		case HeaderVersion:
			if v != envelopeVersion {
				bad(h.Key, v, fmt.Errorf("unsupported envelope version (this build reads %s)", envelopeVersion))
			}
		case HeaderReason:
			env.Reason = v
		case HeaderError:
			env.Error = v
		case HeaderStack:
			env.Stack = v
		case HeaderDeliveryCount:
			env.DeliveryCount = int32(count(h.Key, v, 32))
		case HeaderSourceTopic:
			env.SourceTopic = v
		case HeaderSourcePartition:
			env.SourcePartition = int32(count(h.Key, v, 32))
		case HeaderSourceOffset:
			env.SourceOffset = count(h.Key, v, 64)
		case HeaderValueOmitted:
			env.ValueOmitted, env.OmittedValueSize = true, int(count(h.Key, v, 32))
		case HeaderGroup:
			env.Group = v
		case HeaderWorkerHost:
			env.WorkerHost = v
		case HeaderEnqueuedAt, HeaderFirstAttemptAt, HeaderLastAttemptAt, HeaderParkedAt:
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad(h.Key, v, err)
			}
			switch h.Key {
			case HeaderEnqueuedAt:
				env.EnqueuedAt = t
			case HeaderFirstAttemptAt:
				env.FirstAttemptAt = t
			case HeaderLastAttemptAt:
				env.LastAttemptAt = t
			case HeaderParkedAt:
				env.ParkedAt = t
			}
		}
		// Unknown shareq-dlq-* headers are ignored: a newer writer may add
		// headers without changing the version.
	}
	for _, name := range []string{HeaderReason, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset} {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("%w: header %s is missing (was the record written by dlq.Middleware?)", ErrMalformed, name))
		}
	}
	if seen[HeaderReason] && env.Reason == "" {
		errs = append(errs, fmt.Errorf("%w: header %s is empty", ErrMalformed, HeaderReason))
	}
	if seen[HeaderSourceTopic] && env.SourceTopic == "" {
		errs = append(errs, fmt.Errorf("%w: header %s is empty", ErrMalformed, HeaderSourceTopic))
	}
	if len(errs) > 0 {
		return Envelope{}, errors.Join(errs...)
	}
	return env, nil
}

// parseCount parses a header's non-negative decimal of the given bit size.
func parseCount(v string, bits int) (int64, error) {
	n, err := strconv.ParseInt(v, 10, bits)
	if err == nil && n < 0 {
		err = errors.New("negative")
	}
	return n, err
}

// isBrokerRecord reports whether hs are a broker dead-letter record's:
// the broker's headers and none of the middleware's.
func isBrokerRecord(hs []kgo.RecordHeader) bool {
	broker := false
	for _, h := range hs {
		switch {
		case strings.HasPrefix(h.Key, HeaderPrefix):
			return false
		case strings.HasPrefix(h.Key, BrokerHeaderPrefix):
			broker = true
		}
	}
	return broker
}

// parseBrokerHeaders decodes the __dlq.errors.* headers of a broker
// dead-letter record; the source headers are required.
func parseBrokerHeaders(hs []kgo.RecordHeader) (Envelope, error) {
	env := Envelope{Broker: true}
	seen := map[string]bool{}
	var errs []error
	num := func(name, v string, bits int) int64 {
		n, err := parseCount(v, bits)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: header %s: %q: %v", ErrMalformed, name, clip(v, 64), err))
		}
		return n
	}
	for _, h := range hs {
		v := string(h.Value)
		seen[h.Key] = true
		switch h.Key {
		case BrokerHeaderTopic:
			env.SourceTopic = v
		case BrokerHeaderPartition:
			env.SourcePartition = int32(num(h.Key, v, 32))
		case BrokerHeaderOffset:
			env.SourceOffset = num(h.Key, v, 64)
		case BrokerHeaderGroup:
			env.Group = v
		case BrokerHeaderDeliveryCount:
			env.DeliveryCount = int32(num(h.Key, v, 32))
		case BrokerHeaderMessage:
			env.Error = v
		}
	}
	for _, name := range []string{BrokerHeaderTopic, BrokerHeaderPartition, BrokerHeaderOffset} {
		if !seen[name] {
			errs = append(errs, fmt.Errorf("%w: broker dead-letter header %s is missing", ErrMalformed, name))
		}
	}
	if seen[BrokerHeaderTopic] && env.SourceTopic == "" {
		errs = append(errs, fmt.Errorf("%w: header %s is empty", ErrMalformed, BrokerHeaderTopic))
	}
	if len(errs) > 0 {
		return Envelope{}, errors.Join(errs...)
	}
	switch env.Error {
	case BrokerMessageRejected:
		env.Reason = ReasonBrokerRejected
	case BrokerMessageDeliveryLimit:
		env.Reason = handler.ReasonDeliveryLimit
	default:
		env.Reason = ReasonBroker
	}
	return env, nil
}

// headers returns the envelope as headers, in a fixed order. Empty
// optional fields are left out.
func (e Envelope) headers() []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, 0, 15)
	add := func(k, v string) { hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)}) }
	addTime := func(k string, t time.Time) {
		if !t.IsZero() {
			add(k, t.UTC().Format(time.RFC3339Nano))
		}
	}
	add(HeaderVersion, envelopeVersion)
	add(HeaderReason, e.Reason)
	add(HeaderError, e.Error)
	if e.Stack != "" {
		add(HeaderStack, e.Stack)
	}
	add(HeaderDeliveryCount, strconv.FormatInt(int64(e.DeliveryCount), 10))
	add(HeaderSourceTopic, e.SourceTopic)
	add(HeaderSourcePartition, strconv.FormatInt(int64(e.SourcePartition), 10))
	add(HeaderSourceOffset, strconv.FormatInt(e.SourceOffset, 10))
	if e.Group != "" {
		add(HeaderGroup, e.Group)
	}
	addTime(HeaderEnqueuedAt, e.EnqueuedAt)
	addTime(HeaderFirstAttemptAt, e.FirstAttemptAt)
	addTime(HeaderLastAttemptAt, e.LastAttemptAt)
	if e.WorkerHost != "" {
		add(HeaderWorkerHost, e.WorkerHost)
	}
	addTime(HeaderParkedAt, e.ParkedAt)
	if e.ValueOmitted {
		add(HeaderValueOmitted, strconv.Itoa(e.OmittedValueSize))
	}
	return hs
}

// jobHeaders returns the headers of hs that are not envelope headers, in
// a new slice (nil when there are none).
func jobHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, HeaderPrefix) {
			out = append(out, h)
		}
	}
	return out
}

// truncated is appended to text cut by truncate.
const truncated = " …[truncated]"

// truncate returns s as valid UTF-8 of at most max bytes. Invalid UTF-8 is
// replaced; text longer than max is cut on a rune boundary and ends with
// a marker that says so.
func truncate(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	if max <= len(truncated) {
		return clip(s, max)
	}
	return clip(s, max-len(truncated)) + truncated
}

// clip cuts valid UTF-8 s to at most max bytes on a rune boundary.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
