package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of a replay marker. After [Replay] re-produced a parked job
// and the broker acknowledged it, Replay writes a marker record into the
// same partition of the DLQ topic: no key, no value, these three headers.
// Every marker of a parked record therefore sits after that record in its
// partition, so any read of a DLQ partition from an offset up to its end
// sees the markers of every record it reads. [List], [Get] and [Replay]
// read them into [Parked.Replays] and never show a marker as a job;
// [Parse] returns [ErrMarker] for one.
//
// Why markers in the DLQ partition rather than a compacted side topic
// keyed by DLQ location: the side topic has no index either (Kafka looks
// nothing up by key), so a reader would have to read all of it to learn
// the state of one page, and it would be a second topic to create, grant
// and keep in step; a marker needs nothing new, is read by the same
// fetches as the records it marks, and cannot outlive the topic. The cost
// is that a reader of a page reads on to the partition's end.
const (
	// HeaderReplayedOffset is the DLQ offset of the replayed record, in
	// the marker's own partition.
	HeaderReplayedOffset = "shareq-replayed-offset"
	// HeaderReplayedAt is when the replayed job was acknowledged (RFC 3339
	// with nanoseconds, UTC).
	HeaderReplayedAt = "shareq-replayed-at"
	// HeaderReplayedTo is "topic/partition/offset" of the record the
	// replay produced.
	HeaderReplayedTo = "shareq-replayed-to"
)

// ErrMarker is returned (wrapped) by [Parse] for a replay marker record
// (see [HeaderReplayedOffset]): it is bookkeeping, not a parked job.
var ErrMarker = errors.New("dlq: replay marker, not a parked job")

// ReplayMark is one replay of a parked job, as its marker records it.
type ReplayMark struct {
	// At is when the replayed job was acknowledged.
	At time.Time
	// Topic, Partition and Offset locate the record the replay produced.
	Topic     string
	Partition int32
	Offset    int64
	// Marker is the offset of the marker record in the DLQ partition.
	Marker int64
}

// IsMarker reports whether r is a replay marker (it carries
// [HeaderReplayedOffset]) rather than a parked job.
func IsMarker(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderReplayedOffset {
			return true
		}
	}
	return false
}

// ParseMarker decodes a replay marker: the DLQ offset of the record it
// marks (in r's partition) and the replay it records. It returns an
// error wrapping [ErrMalformed] when r is not a well-formed marker.
func ParseMarker(r *kgo.Record) (of int64, m ReplayMark, err error) {
	var seen, seenAt bool
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderReplayedOffset:
			seen = true
			if of, err = parseCount(v, 64); err != nil {
				return 0, ReplayMark{}, fmt.Errorf("%w: marker %s: header %s: %q: %v", ErrMalformed, sourceID(r.Topic, r.Partition, r.Offset), h.Key, clip(v, 64), err)
			}
		case HeaderReplayedAt:
			seenAt = true
			if m.At, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return 0, ReplayMark{}, fmt.Errorf("%w: marker %s: header %s: %q: %v", ErrMalformed, sourceID(r.Topic, r.Partition, r.Offset), h.Key, clip(v, 64), err)
			}
		case HeaderReplayedTo:
			if m.Topic, m.Partition, m.Offset, err = parseLocation(v); err != nil {
				return 0, ReplayMark{}, fmt.Errorf("%w: marker %s: header %s: %q: %v", ErrMalformed, sourceID(r.Topic, r.Partition, r.Offset), h.Key, clip(v, 64), err)
			}
		}
	}
	if !seen {
		return 0, ReplayMark{}, fmt.Errorf("%w: record %s: no %s header", ErrMalformed, sourceID(r.Topic, r.Partition, r.Offset), HeaderReplayedOffset)
	}
	if !seenAt {
		m.At = r.Timestamp
	}
	if of >= r.Offset {
		return 0, ReplayMark{}, fmt.Errorf("%w: marker %s marks offset %d, not an earlier one", ErrMalformed, sourceID(r.Topic, r.Partition, r.Offset), of)
	}
	m.Marker = r.Offset
	return of, m, nil
}

// parseLocation parses "topic/partition/offset"; the topic may contain
// slashes only if Kafka allowed them (it does not), so the last two
// fields are split off the end.
func parseLocation(s string) (topic string, partition int32, offset int64, err error) {
	rest, off, ok1 := cutLast(s, "/")
	topic, part, ok2 := cutLast(rest, "/")
	if !ok1 || !ok2 || topic == "" {
		return "", 0, 0, errors.New("want topic/partition/offset")
	}
	p, err := parseCount(part, 32)
	if err != nil {
		return "", 0, 0, err
	}
	o, err := parseCount(off, 64)
	if err != nil {
		return "", 0, 0, err
	}
	return topic, int32(p), o, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// markerRecord returns the marker of p's replay to the record at.
func markerRecord(p *Parked, at *kgo.Record, when time.Time) *kgo.Record {
	return &kgo.Record{
		Topic:     p.Topic,
		Partition: p.Partition,
		Headers: []kgo.RecordHeader{
			{Key: HeaderReplayedOffset, Value: strconv.AppendInt(nil, p.Offset, 10)},
			{Key: HeaderReplayedAt, Value: []byte(when.UTC().Format(time.RFC3339Nano))},
			{Key: HeaderReplayedTo, Value: []byte(sourceID(at.Topic, at.Partition, at.Offset))},
		},
	}
}

// marks holds the replay markers read from a DLQ topic: per partition,
// per marked offset, its replays in marker order.
type marks map[int32]map[int64][]ReplayMark

// add records marker r, if it is a well-formed one; it reports whether r
// is a marker at all.
func (ms marks) add(r *kgo.Record) bool {
	if !IsMarker(r) {
		return false
	}
	of, m, err := ParseMarker(r)
	if err != nil {
		return true // a marker, if a broken one: never a job
	}
	if ms[r.Partition] == nil {
		ms[r.Partition] = map[int64][]ReplayMark{}
	}
	ms[r.Partition][of] = append(ms[r.Partition][of], m)
	return true
}

func (ms marks) of(partition int32, offset int64) []ReplayMark {
	return ms[partition][offset]
}

// readMarks reads the markers in ss of topic through cl.
func readMarks(ctx context.Context, cl *kgo.Client, topic string, ss map[int32]span) (marks, error) {
	ms := marks{}
	err := read(ctx, cl, topic, ss, func(r *kgo.Record) error {
		ms.add(r)
		return nil
	})
	return ms, err
}
