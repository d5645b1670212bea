package dlq

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PreviewBytes is how much of each parked job's value [List] keeps.
const PreviewBytes = 256

// ErrNoTopic is returned (wrapped, with the topic's name) by [List], [Get]
// and [Replay] when the DLQ topic does not exist.
var ErrNoTopic = errors.New("dlq: topic does not exist")

// ErrNoRecord is returned (wrapped) by [Get] when there is no record at
// the requested offset.
var ErrNoRecord = errors.New("dlq: no record at that offset")

// OffsetRange selects offsets From (inclusive) to End (exclusive) in each
// partition of a DLQ topic. End 0 means no upper bound, so the zero value
// selects every offset.
type OffsetRange struct {
	From int64
	End  int64
}

// Contains reports whether off is in r.
func (r OffsetRange) Contains(off int64) bool {
	return off >= r.From && (r.End == 0 || off < r.End)
}

// String returns r as "FROM-LAST" with LAST inclusive, "FROM-" when r has
// no upper bound, or "" for the zero value.
func (r OffsetRange) String() string {
	switch {
	case r == OffsetRange{}:
		return ""
	case r.End == 0:
		return strconv.FormatInt(r.From, 10) + "-"
	}
	return strconv.FormatInt(r.From, 10) + "-" + strconv.FormatInt(r.End-1, 10)
}

func (r OffsetRange) validate() error {
	if r.From < 0 || r.End < 0 {
		return fmt.Errorf("dlq: offset range %d..%d: offsets must not be negative", r.From, r.End)
	}
	if r.End != 0 && r.End <= r.From {
		return fmt.Errorf("dlq: offset range: end %d is not after start %d", r.End, r.From)
	}
	return nil
}

// Filter selects parked jobs. The zero value selects all of them.
type Filter struct {
	// Reason keeps jobs parked with exactly this reason ("" for any).
	Reason string
	// SourceTopic keeps jobs from exactly this topic ("" for any).
	SourceTopic string
	// Partitions keeps the DLQ topic's partitions listed (nil for all).
	Partitions []int32
	// Offsets keeps the DLQ records in this range, in every partition
	// read.
	Offsets OffsetRange
	// ParkedFrom keeps jobs parked at or after it, ParkedTo jobs parked
	// before it (Envelope.ParkedAt; the zero time: no bound).
	ParkedFrom, ParkedTo time.Time
	// Text keeps jobs whose error text or value contains it, ignoring
	// case ("" for any). A job parked without its value
	// ([HeaderValueOmitted]) matches on its error only.
	Text string
	// JobID keeps the job whose ID ([Parked.JobID]: the producer's
	// [handler.JobIDHeader]) is exactly JobID, and the job whose source
	// record is JobID written "topic/partition/offset" ("" for any). The
	// broker's dead-letter records (Envelope.Broker) carry no headers:
	// [List] and [Replay] match one on the job ID of its source record,
	// read back from the source topic (as [List] does for a page), and
	// on its source location, which is all that is left of it once the
	// source record is gone.
	JobID string
}

// matches reports whether the envelope of a parsed record passes f. The
// offset and partition parts are applied while reading.
func (f *Filter) matches(p *Parked) bool {
	return f.matchesEnvelope(p) && f.matchesJobID(p)
}

// matchesEnvelope reports whether a parsed record passes f, its job ID
// aside.
func (f *Filter) matchesEnvelope(p *Parked) bool {
	return (f.Reason == "" || p.Reason == f.Reason) &&
		(f.SourceTopic == "" || p.SourceTopic == f.SourceTopic) &&
		(f.ParkedFrom.IsZero() || !p.ParkedAt.Before(f.ParkedFrom)) &&
		(f.ParkedTo.IsZero() || p.ParkedAt.Before(f.ParkedTo)) &&
		(f.Text == "" || containsFold(p.Error, f.Text) || containsFold(string(p.Value), f.Text))
}

// matchesJobID reports whether a parsed record passes f's JobID, as far
// as it is known: see needsSource.
func (f *Filter) matchesJobID(p *Parked) bool {
	return f.JobID == "" || p.JobID() == f.JobID || sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset) == f.JobID
}

// needsSource reports whether p passing f's JobID can only be told
// from its source record: p is a broker dead-letter record not restored
// yet, and its source location is not JobID.
func (f *Filter) needsSource(p *Parked) bool {
	return p.Broker && !p.Restored && !f.matchesJobID(p)
}

// byEnvelope reports whether f selects by anything a parked job holds,
// so that records that are not DLQ envelopes never match.
func (f *Filter) byEnvelope() bool {
	return f.Reason != "" || f.SourceTopic != "" || !f.ParkedFrom.IsZero() || !f.ParkedTo.IsZero() || f.Text != "" || f.JobID != ""
}

// containsFold reports whether sub is in s, ignoring case.
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// String describes f, for logs and replay progress metadata; "all" for
// the zero value. Equal filters give equal strings.
func (f *Filter) String() string {
	var parts []string
	if f.Reason != "" {
		parts = append(parts, "reason="+strconv.Quote(f.Reason))
	}
	if f.SourceTopic != "" {
		parts = append(parts, "source-topic="+strconv.Quote(f.SourceTopic))
	}
	if len(f.Partitions) > 0 {
		ps := slices.Clone(f.Partitions)
		slices.Sort(ps)
		ps = slices.Compact(ps)
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = strconv.FormatInt(int64(p), 10)
		}
		parts = append(parts, "partitions="+strings.Join(s, ","))
	}
	if r := f.Offsets.String(); r != "" {
		parts = append(parts, "offsets="+r)
	}
	if !f.ParkedFrom.IsZero() {
		parts = append(parts, "parked-from="+f.ParkedFrom.UTC().Format(time.RFC3339Nano))
	}
	if !f.ParkedTo.IsZero() {
		parts = append(parts, "parked-to="+f.ParkedTo.UTC().Format(time.RFC3339Nano))
	}
	if f.Text != "" {
		parts = append(parts, "text="+strconv.Quote(f.Text))
	}
	if f.JobID != "" {
		parts = append(parts, "job-id="+strconv.Quote(f.JobID))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// markSpans returns the spans of f (see spans) extended to the
// high-water mark, where the markers of the records in f's window are.
func markSpans(ctx context.Context, adm *kadm.Client, topic string, f *Filter) (map[int32]span, error) {
	open := *f
	open.Offsets.End = 0
	return spans(ctx, adm, topic, &open)
}

// span is the offsets [next, end) still to read in one partition.
type span struct{ next, end int64 }

// spans returns, for each partition of topic that f selects, the offsets
// to read: from the later of the log start and f.Offsets.From, to the
// earlier of the high-water mark now and f.Offsets.End.
func spans(ctx context.Context, adm *kadm.Client, topic string, f *Filter) (map[int32]span, error) {
	if err := f.Offsets.validate(); err != nil {
		return nil, err
	}
	if err := topicExists(ctx, adm, topic); err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, offsetsErr("start", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, offsetsErr("end", topic, err)
	}
	want := func(p int32) bool { return len(f.Partitions) == 0 || slices.Contains(f.Partitions, p) }
	out := make(map[int32]span)
	for p, e := range ends[topic] {
		if !want(p) {
			continue
		}
		s := span{next: max(f.Offsets.From, 0), end: e.Offset}
		if st, ok := starts.Lookup(topic, p); ok && st.Offset > s.next {
			s.next = st.Offset
		}
		if f.Offsets.End > 0 && f.Offsets.End < s.end {
			s.end = f.Offsets.End
		}
		out[p] = s
	}
	for _, p := range f.Partitions {
		if _, ok := ends[topic][p]; !ok {
			return nil, fmt.Errorf("dlq: topic %s has no partition %d", topic, p)
		}
	}
	return out, nil
}

// offsetsErr is the error of listing topic's start or end offsets: one
// that says the topic is unknown (deleted since topicExists saw it)
// wraps ErrNoTopic too.
func offsetsErr(which, topic string, err error) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		return fmt.Errorf("%w: %s (deleted meanwhile: list %s offsets: %w)", ErrNoTopic, topic, which, err)
	}
	return fmt.Errorf("dlq: list %s offsets of %s: %w", which, topic, err)
}

func topicExists(ctx context.Context, adm *kadm.Client, topic string) error {
	if topic == "" {
		return errors.New("dlq: no DLQ topic given")
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("dlq: describe topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	if td.Err != nil {
		return fmt.Errorf("dlq: describe topic %s: %w", topic, td.Err)
	}
	return nil
}

// checkReader returns an error unless cl can read topic's partitions
// directly: it must not be a group, share-group or regex consumer, nor
// consume topics or partitions of its own, nor be reading topic already.
func checkReader(cl *kgo.Client, topic string) error {
	if cl == nil {
		return errors.New("dlq: client is nil")
	}
	const advice = "; pass a client that consumes nothing (a plain producer client)"
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		return fmt.Errorf("dlq: the client is a member of consumer group %q%s", g, advice)
	}
	if g, _ := cl.OptValue(kgo.ShareGroup).(string); g != "" {
		return fmt.Errorf("dlq: the client is a member of share group %q%s", g, advice)
	}
	if re, _ := cl.OptValue(kgo.ConsumeRegex).(bool); re {
		return fmt.Errorf("dlq: the client consumes by regex%s", advice)
	}
	if ts, _ := cl.OptValue(kgo.ConsumeTopics).([]string); len(ts) > 0 {
		return fmt.Errorf("dlq: the client consumes topics %v%s", ts, advice)
	}
	if ps, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset); len(ps) > 0 {
		return fmt.Errorf("dlq: the client consumes partitions directly%s", advice)
	}
	if slices.Contains(cl.GetConsumeTopics(), topic) {
		return fmt.Errorf("dlq: the client is already reading %s: List, Get and Replay calls on one client must not overlap", topic)
	}
	return nil
}

// idleTimeout is how long read waits for records it knows exist before it
// gives up. A var for tests.
var idleTimeout = 30 * time.Second

// goneCheck is how long read polls without a record before it asks
// whether its topic still exists: a topic deleted under a read leaves the
// client fetching nothing, with no error, so without the check a search
// over a cluster's DLQ topics would wait idleTimeout on each topic deleted
// while it ran.
const goneCheck = time.Second

// errPartitionDone, returned by a read callback, stops reading that
// record's partition.
var errPartitionDone = errors.New("partition done")

// read reads the offsets in ss from topic with cl, calling fn for each
// record in offset order within a partition. It returns when every span
// is read, fn returns an error other than errPartitionDone, or ctx ends.
func read(ctx context.Context, cl *kgo.Client, topic string, ss map[int32]span, fn func(*kgo.Record) error) error {
	ss = maps.Clone(ss)
	assign := make(map[int32]kgo.Offset)
	for p, s := range ss {
		if s.next >= s.end {
			delete(ss, p)
			continue
		}
		assign[p] = kgo.NewOffset().At(s.next)
	}
	if len(ss) == 0 {
		return nil
	}
	parts := make([]int32, 0, len(assign))
	for p := range assign {
		parts = append(parts, p)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign})
	defer func() {
		cl.RemoveConsumePartitions(map[string][]int32{topic: parts})
		cl.PurgeTopicsFromConsuming(topic) // leave cl as it was
	}()

	done := func(p int32) {
		delete(ss, p)
		cl.RemoveConsumePartitions(map[string][]int32{topic: {p}})
	}
	var idle time.Duration // polled without a record since the last one
	for len(ss) > 0 {
		pctx, cancel := context.WithTimeout(ctx, min(goneCheck, idleTimeout-idle))
		polled := time.Now()
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.IsClientClosed() {
			return kgo.ErrClientClosed
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			switch {
			case ferr != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			case errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID):
				ferr = fmt.Errorf("%w: %s (deleted while it was read: partition %d: %w)", ErrNoTopic, t, p, err)
			default:
				ferr = fmt.Errorf("dlq: read %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		if fs.NumRecords() == 0 {
			if err := topicExists(ctx, kadm.NewClient(cl), topic); errors.Is(err, ErrNoTopic) {
				return fmt.Errorf("%w (deleted while it was read)", err)
			}
			if idle += time.Since(polled); idle < idleTimeout {
				continue
			}
			p := slices.Min(slices.Collect(maps.Keys(ss)))
			return fmt.Errorf("dlq: read %s partition %d: no record for %v at offset %d, below the end %d (compacted or transactional topic?)", topic, p, idleTimeout, ss[p].next, ss[p].end)
		}
		idle = 0
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			if stop != nil || r.Topic != topic {
				return
			}
			s, ok := ss[r.Partition]
			if !ok || r.Offset < s.next {
				return
			}
			if r.Offset >= s.end {
				done(r.Partition)
				return
			}
			s.next = r.Offset + 1
			ss[r.Partition] = s
			err := fn(r)
			switch {
			case errors.Is(err, errPartitionDone):
				done(r.Partition)
				return
			case err != nil:
				stop = err
				return
			}
			if s.next >= s.end {
				done(r.Partition)
			}
		})
		if stop != nil {
			return stop
		}
	}
	return nil
}

// ErrNotDLQ is returned (wrapped, with the topic's name) by [List] when
// the topic holds records but none of them is a DLQ envelope: it is not a
// dead-letter topic (a job topic, most likely, whose DLQ topic is
// "<topic>.dlq" or, for the broker's, "dlq.<group>").
var ErrNotDLQ = errors.New("dlq: not a dead-letter topic")

// List returns up to limit parked jobs from the DLQ topic that pass f,
// ordered by partition and offset: the first limit matches of partition
// 0, then of partition 1, and so on. limit <= 0 means no limit. It reads
// up to each partition's high-water mark at the call, so it returns even
// while jobs are being parked. Each entry's Value is cut to
// [PreviewBytes]. Records that are not DLQ envelopes are listed, with
// Parked.Err set, when f selects by nothing a parked job holds (reason,
// source topic, parked time, text, job ID); replay markers are never
// listed. When the records read hold no DLQ
// envelope at all, List returns an error wrapping [ErrNotDLQ].
//
// Each entry's Replays says whether and when it was replayed: List reads
// each partition from its first selected offset to the high-water mark
// (past the limit, for the markers only), so a page costs a read of the
// rest of its partitions, not of the whole topic. The broker's dead-letter
// records (Envelope.Broker) of the page are restored from their source
// records, read together per source partition, so their JobID is the
// job's real one; where a source record is gone, [Parked.JobIDKnown]
// says so. With f.JobID set, List reads back in the same way the source
// record of every broker dead-letter record that passes the rest of f
// (not only the page's: the job ID is only there), through a second
// client made from cl's options.
//
// cl must consume nothing itself (no consumer or share group, no
// ConsumeTopics or ConsumePartitions): List reads through it by adding
// the topic's partitions for the duration of the call, so calls of List,
// [Get] and [Replay] on one client must not overlap.
func List(ctx context.Context, cl *kgo.Client, topic string, f Filter, limit int) ([]Parked, error) {
	if err := checkReader(cl, topic); err != nil {
		return nil, err
	}
	ss, err := markSpans(ctx, kadm.NewClient(cl), topic, &f)
	if err != nil {
		return nil, err
	}
	ms := marks{}
	out, err := listSpans(ctx, cl, topic, f, limit, ss, ms)
	if err != nil {
		return nil, err
	}
	return finishList(ctx, cl, out, ms)
}

// listSpans is List reading the offsets ss of topic (f's window, and
// what else the caller wants read for its markers): the parked jobs in
// f's window that pass f, at most limit (<= 0: no limit), by partition
// and offset, their replays not filled in. It adds the markers it reads
// to ms.
func listSpans(ctx context.Context, cl *kgo.Client, topic string, f Filter, limit int, ss map[int32]span, ms marks) ([]Parked, error) {
	var (
		byPart               = make(map[int32][]Parked)
		envelopes, malformed int
		bySource             = sourceMatcher{f: &f, opts: cl.Opts()}
	)
	defer bySource.close()
	err := read(ctx, cl, topic, ss, func(r *kgo.Record) error {
		if ms.add(r) || !f.Offsets.Contains(r.Offset) {
			return nil // past the window: read for its markers only
		}
		if limit > 0 && len(byPart[r.Partition]) >= limit {
			// The page is full: read on for the markers, and to tell a
			// DLQ topic from another one.
			if envelopes == 0 && hasEnvelope(r.Headers) {
				envelopes++
			}
			return nil
		}
		p, err := Parse(r)
		if err != nil {
			malformed++
			if f.byEnvelope() {
				return nil
			}
			p.Err = err
		} else {
			envelopes++
			if !f.matchesEnvelope(&p) {
				return nil
			}
			if f.needsSource(&p) {
				return bySource.add(ctx, p)
			}
			if !f.matchesJobID(&p) {
				return nil
			}
		}
		byPart[r.Partition] = append(byPart[r.Partition], p)
		return nil
	})
	if err == nil {
		err = bySource.flush(ctx)
	}
	if err != nil {
		return nil, err
	}
	if len(bySource.found) > 0 {
		for _, p := range bySource.found {
			byPart[p.Partition] = append(byPart[p.Partition], p)
		}
		for _, ps := range byPart {
			slices.SortFunc(ps, func(a, b Parked) int { return cmp.Compare(a.Offset, b.Offset) })
		}
	}
	if envelopes == 0 && malformed > 0 {
		return nil, fmt.Errorf("%w: %s: none of its %d records read is a DLQ envelope (a job topic's DLQ topic is %s%s, a share group's broker dead-letter topic dlq.<group>)",
			ErrNotDLQ, topic, malformed, topic, TopicSuffix)
	}
	parts := slices.Sorted(maps.Keys(byPart))
	var out []Parked
	for _, p := range parts {
		out = append(out, byPart[p]...)
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// finishList fills in the replays of the jobs out from ms, restores the
// broker dead-letter records among them from their source records, and
// cuts each value to PreviewBytes.
func finishList(ctx context.Context, cl *kgo.Client, out []Parked, ms marks) ([]Parked, error) {
	var broker []*Parked
	for i := range out {
		p := &out[i]
		p.Replays = ms.of(p.Partition, p.Offset)
		if p.Err == nil && p.Broker && !p.Restored {
			broker = append(broker, p)
		}
	}
	if err := restoreAll(ctx, cl, broker); err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i := range out {
		if p := &out[i]; len(p.Value) > PreviewBytes {
			p.Value = slices.Clone(p.Value[:PreviewBytes])
		}
	}
	return out, nil
}

// restoreBatch is how many broker dead-letter records a [sourceMatcher]
// holds before it reads their source records.
const restoreBatch = 128

// sourceMatcher finds, among broker dead-letter records that pass a
// filter but for its JobID, those whose source record holds that job ID:
// it restores them (see restoreAll) restoreBatch at a time, through a
// client of its own made from opts when first needed (the reading client
// is busy reading the DLQ topic), and keeps those that match.
type sourceMatcher struct {
	f       *Filter
	opts    []kgo.Opt
	cl      *kgo.Client
	pending []*Parked
	// found are the records that match, restored, in the order found.
	found []Parked
}

// add holds p, and matches the records held when there are restoreBatch.
func (m *sourceMatcher) add(ctx context.Context, p Parked) error {
	m.pending = append(m.pending, &p)
	if len(m.pending) < restoreBatch {
		return nil
	}
	return m.flush(ctx)
}

// flush matches the records held. A record whose source record cannot be
// read is known by its source location only, which did not match.
func (m *sourceMatcher) flush(ctx context.Context) error {
	if len(m.pending) == 0 {
		return nil
	}
	if m.cl == nil {
		cl, err := kgo.NewClient(m.opts...)
		if err != nil {
			return fmt.Errorf("dlq: client for source records: %w", err)
		}
		m.cl = cl
	}
	if err := restoreAll(ctx, m.cl, m.pending); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	for _, p := range m.pending {
		if p.Restored && m.f.matchesJobID(p) {
			m.found = append(m.found, *p)
		}
	}
	m.pending = nil
	return nil
}

func (m *sourceMatcher) close() {
	if m.cl != nil {
		m.cl.Close()
	}
}

// hasEnvelope reports whether hs hold a DLQ envelope's or the broker's
// dead-letter headers.
func hasEnvelope(hs []kgo.RecordHeader) bool {
	for _, h := range hs {
		if h.Key == HeaderReason || h.Key == BrokerHeaderTopic {
			return true
		}
	}
	return false
}

// restoreGap is the widest gap between two source offsets [restoreAll]
// reads in one pass; farther apart, it starts another read there.
const restoreGap = 512

// restoreAll restores broker dead-letter records ps from their source
// records (see restore), reading each source partition's wanted offsets
// in as few passes as their spread allows. A record whose source cannot
// be read stays unrestored; the error returned is the first failure.
func restoreAll(ctx context.Context, cl *kgo.Client, ps []*Parked) error {
	type tp struct {
		topic     string
		partition int32
	}
	want := map[tp]map[int64][]*Parked{}
	for _, p := range ps {
		k := tp{p.SourceTopic, p.SourcePartition}
		if want[k] == nil {
			want[k] = map[int64][]*Parked{}
		}
		want[k][p.SourceOffset] = append(want[k][p.SourceOffset], p)
	}
	adm := kadm.NewClient(cl)
	var first error
	fail := func(err error) {
		if first == nil {
			first = err
		}
	}
	ranges := map[string]map[int32]span{}
	for k, byOff := range want {
		if _, ok := ranges[k.topic]; !ok {
			ss, err := spans(ctx, adm, k.topic, &Filter{})
			if err != nil {
				fail(err)
			}
			ranges[k.topic] = ss // nil when the topic is gone
		}
		s, ok := ranges[k.topic][k.partition]
		if !ok {
			fail(fmt.Errorf("%w: %s has no partition %d", ErrNoRecord, k.topic, k.partition))
			continue
		}
		offs := slices.Sorted(maps.Keys(byOff))
		for len(offs) > 0 {
			n := 1
			for n < len(offs) && offs[n]-offs[n-1] <= restoreGap {
				n++
			}
			run := offs[:n]
			offs = offs[n:]
			from, last := max(run[0], s.next), min(run[len(run)-1], s.end-1)
			if from > last {
				continue // removed by retention, or not written
			}
			err := read(ctx, cl, k.topic, map[int32]span{k.partition: {next: from, end: last + 1}}, func(r *kgo.Record) error {
				for _, p := range byOff[r.Offset] {
					if err := restoreFrom(p, r); err != nil {
						fail(err)
					}
				}
				return nil
			})
			if err != nil {
				fail(err)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	return first
}

// Get reads the parked job at partition and offset of the DLQ topic, with
// its full value. It returns an error wrapping [ErrNoRecord] when the
// offset is past the end, was removed by retention, or holds no record,
// and one wrapping [ErrMalformed] (with the Parked still filled in as far
// as possible) when the record is not a DLQ envelope, and one wrapping
// [ErrMarker] when it is a replay marker. Replays lists the record's
// replays: Get reads the partition from offset to its high-water mark for
// their markers. For a record the
// broker wrote (Envelope.Broker), Get also reads the job's own record
// from its source topic and, when it is still there, fills in its key,
// value and headers (Restored). cl must meet the conditions given for
// [List].
func Get(ctx context.Context, cl *kgo.Client, topic string, partition int32, offset int64) (Parked, error) {
	if err := checkReader(cl, topic); err != nil {
		return Parked{}, err
	}
	if offset < 0 {
		return Parked{}, fmt.Errorf("dlq: offset %d: must not be negative", offset)
	}
	rec, err := readOne(ctx, cl, topic, partition, offset)
	if err != nil {
		return Parked{}, err
	}
	p, err := Parse(rec)
	if err != nil {
		return p, err
	}
	// Its markers, if any, come after it.
	ss, err := spans(ctx, kadm.NewClient(cl), topic, &Filter{Partitions: []int32{partition}, Offsets: OffsetRange{From: offset + 1}})
	if err != nil {
		return p, err
	}
	ms, err := readMarks(ctx, cl, topic, ss)
	if err != nil {
		return p, err
	}
	p.Replays = ms.of(partition, offset)
	if !p.Broker {
		return p, nil
	}
	if err := restore(ctx, cl, &p); err != nil && ctx.Err() != nil {
		return p, ctx.Err()
	}
	return p, nil
}

// restore reads the source record of a broker dead-letter record p
// through cl and, when it is the same job, puts its key, value and
// headers in p. The broker's copy, when the group made one, must match
// the source record's key and value.
func restore(ctx context.Context, cl *kgo.Client, p *Parked) error {
	src, err := readOne(ctx, cl, p.SourceTopic, p.SourcePartition, p.SourceOffset)
	if err != nil {
		return err
	}
	return restoreFrom(p, src)
}

// restoreFrom puts the key, value and headers of src, the source record
// of a broker dead-letter record p, in p, when it is the same job.
func restoreFrom(p *Parked, src *kgo.Record) error {
	copied := len(p.Key) > 0 || len(p.Value) > 0
	if copied && (!bytes.Equal(src.Key, p.Key) || !bytes.Equal(src.Value, p.Value)) {
		return fmt.Errorf("%w: the record at %s is not the job (its key or value differ from the broker's copy)", ErrNoRecord, sourceID(p.SourceTopic, p.SourcePartition, p.SourceOffset))
	}
	p.Key, p.Value, p.ValueSize = src.Key, src.Value, len(src.Value)
	p.Headers = jobHeaders(src.Headers)
	p.EnqueuedAt = src.Timestamp
	p.Restored = true
	return nil
}

// readOne reads the record at partition and offset of topic through cl.
func readOne(ctx context.Context, cl *kgo.Client, topic string, partition int32, offset int64) (*kgo.Record, error) {
	adm := kadm.NewClient(cl)
	ss, err := spans(ctx, adm, topic, &Filter{Partitions: []int32{partition}})
	if err != nil {
		return nil, err
	}
	s := ss[partition]
	switch {
	case offset >= s.end:
		return nil, fmt.Errorf("%w: %s partition %d ends at offset %d (next to be written), asked for %d", ErrNoRecord, topic, partition, s.end, offset)
	case offset < s.next:
		return nil, fmt.Errorf("%w: %s partition %d starts at offset %d (earlier records were removed by retention), asked for %d", ErrNoRecord, topic, partition, s.next, offset)
	}
	var (
		rec   *kgo.Record
		found bool
	)
	err = read(ctx, cl, topic, map[int32]span{partition: {next: offset, end: s.end}}, func(r *kgo.Record) error {
		rec, found = r, r.Offset == offset
		return errPartitionDone
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %s partition %d has no record at offset %d (compacted, or a transaction marker)", ErrNoRecord, topic, partition, offset)
	}
	return rec, nil
}
