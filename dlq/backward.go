package dlq

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Backward is what [ListBackward] read of one partition of a DLQ topic.
type Backward struct {
	Partition int32
	// Jobs are the parked jobs found, newest (highest offset) first.
	Jobs []Parked
	// Start is the lowest offset the read could reach: the partition's
	// log start, or Filter.Offsets.From when later. End is the offset the
	// read started from (exclusive).
	Start, End int64
	// From is the lowest offset read: the offsets [From, End) were
	// scanned, those in [Start, From) were not.
	From int64
	// Capped reports that the read stopped at its scan limit with offsets
	// left unread (From > Start) and fewer than the jobs asked for.
	Capped bool
	// Reads is the windows read.
	Reads int
}

// Scanned is the offsets b scanned: End - From.
func (b *Backward) Scanned() int64 { return b.End - b.From }

// More reports whether offsets older than b's were left unread.
func (b *Backward) More() bool { return b.From > b.Start }

// ListBackward reads the partitions of the DLQ topic that f selects
// newest first: each from the offset before gives for it (exclusive; a
// partition missing reads from its high-water mark, or from the end of
// f.Offsets when earlier) back toward its log start (or f.Offsets.From),
// in growing windows, until it has n jobs that pass f (or more: every
// match of its last window), reaches its
// start, or has scanned scanLimit offsets (scanLimit <= 0: no limit).
// With n <= 0 (no limit on the jobs) it reads the newest scanLimit
// offsets in one window. It reads each offset once: the first window on
// to the high-water mark, for the replay markers of its jobs and of the
// older windows' (a marker follows its record), the others only
// themselves. (A window's fetch can also bring back records past the
// window's end, up to the client's fetch size, which are dropped.) So a
// read from the high-water mark with n <= 0 fetches at most scanLimit
// records a partition, however long the partition is.
// It returns one Backward per partition, by partition; their jobs are as
// [List] returns them (replays, restored broker records, values cut to
// [PreviewBytes]). cl must meet the conditions given for [List].
func ListBackward(ctx context.Context, cl *kgo.Client, topic string, f Filter, before map[int32]int64, n, scanLimit int) ([]Backward, error) {
	if err := checkReader(cl, topic); err != nil {
		return nil, err
	}
	if err := f.Offsets.validate(); err != nil {
		return nil, err
	}
	ss, err := markSpans(ctx, kadm.NewClient(cl), topic, &f)
	if err != nil {
		return nil, err
	}
	out := make([]Backward, 0, len(ss))
	for _, p := range slices.Sorted(maps.Keys(ss)) {
		s := ss[p] // to the high-water mark
		b := Backward{Partition: p, Start: s.next, End: s.end}
		if f.Offsets.End > 0 {
			b.End = min(b.End, f.Offsets.End)
		}
		if c, ok := before[p]; ok {
			b.End = min(b.End, c)
		}
		b.End = max(b.End, b.Start)
		if err := b.read(ctx, cl, topic, f, n, scanLimit, s.end); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// read fills b from its End back, as ListBackward describes; hwm is the
// partition's high-water mark.
func (b *Backward) read(ctx context.Context, cl *kgo.Client, topic string, f Filter, n, scanLimit int, hwm int64) error {
	b.From = b.End
	limit := int64(scanLimit)
	if limit <= 0 {
		limit = b.End - b.Start
	}
	ms := marks{}
	// The first window reads on to the high-water mark for the replay
	// markers of its jobs and of every older window's (a marker follows
	// its record); the others read only themselves.
	readTo := hwm
	window := int64(max(n*2, 64))
	if n <= 0 {
		window = limit // no reason to stop early: one read
	}
	for b.From > b.Start && (n <= 0 || len(b.Jobs) < n) {
		if b.Scanned() >= limit {
			b.Capped = true
			break
		}
		from := max(b.Start, b.From-window, b.End-limit)
		pf := f
		pf.Partitions = []int32{b.Partition}
		pf.Offsets = OffsetRange{From: from, End: b.From}
		got, err := listSpans(ctx, cl, topic, pf, 0, map[int32]span{b.Partition: {next: from, end: readTo}}, ms)
		b.Reads++
		if err != nil {
			return err
		}
		slices.Reverse(got)
		b.Jobs = append(b.Jobs, got...)
		b.From, readTo = from, from
		window = min(window*2, 8192)
	}
	var err error
	b.Jobs, err = finishList(ctx, cl, b.Jobs, ms)
	return err
}
