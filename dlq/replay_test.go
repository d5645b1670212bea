package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// replayBundle is a kfake cluster with a source topic "jobs" and its DLQ
// topic "jobs.dlq" (two partitions each) holding parked jobs.
type replayBundle struct {
	c  *kfake.Cluster
	cl *kgo.Client
	// reasons[i] is the reason job i was parked with.
	reasons []string
}

// setupReplay parks n jobs through the middleware: job i fails with
// reason "decode" when i%3 == 0, else "permanent". Even jobs carry a job
// ID header "job-i"; odd ones have none (their ID is jobs/0/i).
func setupReplay(t *testing.T, n int) *replayBundle {
	t.Helper()
	c, cl := newCluster(t, 2, "jobs", "jobs.dlq")
	mw, err := Middleware(cl, Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	b := &replayBundle{c: c, cl: cl}
	for i := range n {
		reason := handler.ReasonPermanent
		if i%3 == 0 {
			reason = handler.ReasonDecode
		}
		b.reasons = append(b.reasons, reason)
		job := &handler.Job{Topic: "jobs", Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i),
			Value: fmt.Appendf(nil, "payload %d", i), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5}
		if i%2 == 0 {
			job.Headers = []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "job-%d", i)}}
		}
		h := failWith(&handler.PermanentError{Reason: reason, Err: errors.New("nope")})
		if _, parked := handler.ParkedOf(handler.Chain(h, mw).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
	return b
}

// wantID returns the job ID replayed job i must carry.
func wantID(i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("job-%d", i)
	}
	return fmt.Sprintf("jobs/0/%d", i)
}

// replayed returns the records in "jobs" counted by job ID, checking each
// is a well-formed replay.
func (b *replayBundle) replayed(t *testing.T) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, r := range consumeAll(t, b.c, "jobs") {
		id, _ := header(r.Headers, handler.JobIDHeader)
		counts[id]++
		from, ok := header(r.Headers, HeaderReplayedFrom)
		if !ok || !strings.HasPrefix(from, "jobs.dlq/") {
			t.Errorf("replayed %s: %s = %q", id, HeaderReplayedFrom, from)
		}
		for _, h := range r.Headers {
			if strings.HasPrefix(h.Key, HeaderPrefix) {
				t.Errorf("replayed %s still carries %s", id, h.Key)
			}
		}
		if countHeader(r.Headers, handler.JobIDHeader) != 1 || countHeader(r.Headers, HeaderReplayedFrom) != 1 {
			t.Errorf("replayed %s: duplicated headers %v", id, r.Headers)
		}
		var i int
		if _, err := fmt.Sscanf(string(r.Key), "k%d", &i); err != nil || string(r.Value) != fmt.Sprintf("payload %d", i) || wantID(i) != id {
			t.Errorf("replayed record key %q value %q id %q do not match", r.Key, r.Value, id)
		}
	}
	return counts
}

func TestReplayAllExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 12)
	ctx := context.Background()
	first, err := Replay(ctx, b.cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if first.Read != 12 || first.Replayed != 12 || first.Filtered != 0 || first.Group != "shareq-dlq-replay.jobs.dlq" {
		t.Fatalf("stats = %+v", first)
	}
	counts := b.replayed(t)
	for i := range 12 {
		if counts[wantID(i)] != 1 {
			t.Errorf("job %s replayed %d times, want 1", wantID(i), counts[wantID(i)])
		}
	}
	// Running it again finds nothing new: it resumes where the first
	// run ended and reads only the first run's replay markers.
	stats, err := Replay(ctx, b.cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil || stats.Read != 0 || stats.Replayed != 0 {
		t.Fatalf("second run: %+v, %v; want nothing read", stats, err)
	}
	for p, pp := range stats.Partitions {
		if !pp.Resumed || pp.Start != first.Partitions[p].End || pp.Next != pp.End || pp.End != 2*first.Partitions[p].End {
			t.Errorf("second run partition %d: %+v, want resumed at the first run's end %d, past one marker per job", p, pp, first.Partitions[p].End)
		}
	}
}

func TestReplayFilterByReason(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 12)
	var seen []string
	stats, err := Replay(context.Background(), b.cl, "jobs.dlq",
		ReplayFilter(Filter{Reason: handler.ReasonDecode}),
		ReplayLogger(quiet),
		ReplayOnRecord(func(p *Parked) { seen = append(seen, p.JobID()) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != 4 || stats.Filtered != 8 || len(seen) != 4 {
		t.Fatalf("stats = %+v, OnRecord saw %v; want 4 replayed, 8 filtered", stats, seen)
	}
	if !strings.HasPrefix(stats.Group, "shareq-dlq-replay.jobs.dlq.") {
		t.Errorf("group %q: a filtered replay keeps its own progress", stats.Group)
	}
	counts := b.replayed(t)
	for i := range 12 {
		want := 0
		if b.reasons[i] == handler.ReasonDecode {
			want = 1
		}
		if counts[wantID(i)] != want {
			t.Errorf("job %s replayed %d times, want %d", wantID(i), counts[wantID(i)], want)
		}
	}
}

func TestReplayFilterByOffsetsAndPartition(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 20)
	all, err := List(context.Background(), b.cl, "jobs.dlq", Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range all {
		if p.Partition == 1 && p.Offset >= 1 && p.Offset <= 3 {
			want[p.JobID()] = true
		}
	}
	f := Filter{Partitions: []int32{1}, Offsets: OffsetRange{From: 1, End: 4}}
	stats, err := Replay(context.Background(), b.cl, "jobs.dlq", ReplayFilter(f), ReplayLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != len(want) || len(stats.Partitions) != 1 {
		t.Fatalf("stats %+v, want %d replayed from partition 1 only", stats, len(want))
	}
	counts := b.replayed(t)
	if len(counts) != len(want) {
		t.Fatalf("replayed %v, want %v", counts, want)
	}
	for id := range want {
		if counts[id] != 1 {
			t.Errorf("job %s replayed %d times", id, counts[id])
		}
	}
}

func TestReplayInterruptedResumes(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 15)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const k = 6
	n := 0
	stats, err := Replay(ctx, b.cl, "jobs.dlq", ReplayLogger(quiet), ReplayOnRecord(func(*Parked) {
		if n++; n == k {
			cancel()
		}
	}))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run again to resume") {
		t.Fatalf("interrupted Replay error = %v, want context.Canceled with advice", err)
	}
	if stats.Replayed != k {
		t.Fatalf("interrupted run replayed %d, want %d", stats.Replayed, k)
	}
	stats, err = Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != 15-k {
		t.Fatalf("resumed run replayed %d, want %d", stats.Replayed, 15-k)
	}
	counts := b.replayed(t)
	for i := range 15 {
		if counts[wantID(i)] != 1 {
			t.Errorf("job %s replayed %d times, want exactly 1", wantID(i), counts[wantID(i)])
		}
	}
}

// failingCommitter fails its failAt'th commit (1-based), as if the
// process died between a produce and its commit.
type failingCommitter struct {
	committer
	mu     sync.Mutex
	n      int
	failAt int
}

func (f *failingCommitter) commit(ctx context.Context, group, topic string, offsets map[int32]int64, meta string) error {
	f.mu.Lock()
	f.n++
	fail := f.n == f.failAt
	f.mu.Unlock()
	if fail {
		return errors.New("coordinator gone")
	}
	return f.committer.commit(ctx, group, topic, offsets, meta)
}

// A replay that dies after a job's marker but before its commit does not
// replay that job again: the marker says it was.
func TestReplayCrashBetweenMarkerAndCommit(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 10)
	adm := kadm.NewClient(b.cl)
	// The 4th commit fails; the final commit on the way out fails too
	// (failAt reached only once, so make the exit commit skip by failing
	// the whole run the way a crash would: no retry of the commit).
	fc := &failingCommitter{committer: kadmCommitter{adm}, failAt: 4}
	rp := &replayer{read: b.cl, adm: adm, prod: b.cl, com: crashAfterFailure{fc}}
	stats, err := rp.run(context.Background(), replayConfigFor(t, "jobs.dlq", ReplayLogger(quiet)))
	if err == nil || !strings.Contains(err.Error(), "could not save progress") || !strings.Contains(err.Error(), "replay marker") {
		t.Fatalf("run error = %v, want a failed save", err)
	}
	if stats.Replayed != 4 {
		t.Fatalf("replayed %d before the failure, want 4 (the 4th produced and marked, not saved)", stats.Replayed)
	}
	stats, err = Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != 6 || stats.AlreadyReplayed != 1 {
		t.Fatalf("resumed run: %+v, want 6 replayed and the marked, unsaved one passed over", stats)
	}
	counts := b.replayed(t)
	for i := range 10 {
		if counts[wantID(i)] != 1 {
			t.Errorf("job %s replayed %d times, want 1", wantID(i), counts[wantID(i)])
		}
	}
}

// crashAfterFailure stops committing after the first failed commit, as a
// process that died would.
type crashAfterFailure struct{ *failingCommitter }

func (c crashAfterFailure) commit(ctx context.Context, group, topic string, offsets map[int32]int64, meta string) error {
	c.mu.Lock()
	dead := c.n >= c.failAt
	c.mu.Unlock()
	if dead {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
		return errors.New("dead")
	}
	return c.failingCommitter.commit(ctx, group, topic, offsets, meta)
}

func TestReplayProduceFailureLosesNothing(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 6)
	adm := kadm.NewClient(b.cl)
	fp := &flakyProducer{real: b.cl, failAt: 3}
	rp := &replayer{read: b.cl, adm: adm, prod: fp, com: kadmCommitter{adm}}
	stats, err := rp.run(context.Background(), replayConfigFor(t, "jobs.dlq", ReplayLogger(quiet)))
	if err == nil || stats.Replayed != 2 {
		t.Fatalf("run = %+v, %v; want an error after 2 replayed", stats, err)
	}
	if _, err := Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	counts := b.replayed(t)
	for i := range 6 {
		if counts[wantID(i)] != 1 {
			t.Errorf("job %s replayed %d times, want 1", wantID(i), counts[wantID(i)])
		}
	}
}

type flakyProducer struct {
	real   Producer
	n      atomic.Int32
	failAt int32
}

func (f *flakyProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if f.n.Add(1) == f.failAt {
		return kgo.ProduceResults{{Record: rs[0], Err: errors.New("not enough replicas")}}
	}
	return f.real.ProduceSync(ctx, rs...)
}

func TestReplayDryRun(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 6)
	var seen int
	stats, err := Replay(context.Background(), b.cl, "jobs.dlq", ReplayDryRun(), ReplayLogger(quiet),
		ReplayFilter(Filter{Reason: handler.ReasonPermanent}), ReplayOnRecord(func(*Parked) { seen++ }))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != 4 || seen != 4 {
		t.Fatalf("dry run %+v, saw %d; want 4 selected", stats, seen)
	}
	if got := len(consumeAll(t, b.c, "jobs")); got != 0 {
		t.Fatalf("dry run produced %d records", got)
	}
	// Nothing saved: a real run replays them all.
	stats, err = Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet), ReplayFilter(Filter{Reason: handler.ReasonPermanent}))
	if err != nil || stats.Replayed != 4 {
		t.Fatalf("real run after dry run: %+v, %v", stats, err)
	}
}

func TestReplayStopsAtHighWaterMark(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 4)
	// Each replayed job is parked again at once, as a job that keeps
	// failing would be: the run must not chase its own tail.
	mw, err := Middleware(b.cl, Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	reparked := 0
	stats, err := Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet), ReplayOnRecord(func(p *Parked) {
		job := &handler.Job{Topic: "jobs", Offset: 100 + int64(reparked), DeliveryCount: 1}
		if _, parked := handler.ParkedOf(handler.Chain(failWith(handler.Permanent(errors.New("again"))), mw).Handle(context.Background(), job)); !parked {
			t.Error("job not parked again")
		}
		reparked++
	}))
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replayed != 4 || reparked != 4 {
		t.Fatalf("replayed %d, want 4: records parked during the run belong to the next", stats.Replayed)
	}
	stats, err = Replay(context.Background(), b.cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil || stats.Replayed != 4 {
		t.Fatalf("next run: %+v, %v; want the 4 re-parked", stats, err)
	}
}

func TestReplayRate(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 5)
	start := time.Now()
	if _, err := Replay(context.Background(), b.cl, "jobs.dlq", ReplayRate(20), ReplayLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	// 5 records at 20/s: the first at once, then 4 spaced 50 ms.
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Fatalf("5 records at 20/s took %v, want at least 200ms", d)
	}
}

func TestReplayErrors(t *testing.T) {
	t.Parallel()
	c, cl := newCluster(t, 1, "jobs")
	ctx := context.Background()
	if _, err := Replay(ctx, cl, "nope.dlq"); !errors.Is(err, ErrNoTopic) || !strings.Contains(err.Error(), "nope.dlq") {
		t.Errorf("missing topic: %v", err)
	}
	if _, err := Replay(ctx, cl, "jobs", ReplayFilter(Filter{Offsets: OffsetRange{From: 5, End: 5}})); err == nil {
		t.Error("empty range: nil error")
	}
	if _, err := Replay(ctx, cl, "jobs", ReplayFilter(Filter{Partitions: []int32{7}})); err == nil || !strings.Contains(err.Error(), "no partition 7") {
		t.Errorf("missing partition: %v", err)
	}
	grp, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer grp.Close()
	if _, err := Replay(ctx, grp, "jobs"); err == nil || !strings.Contains(err.Error(), "consumer group") {
		t.Errorf("group client: %v", err)
	}
}

// TestReplayOptionsValidated is the list of what Replay refuses before
// it reads anything, each with the words its message must have.
func TestReplayOptionsValidated(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name, c := range map[string]struct {
		topic string
		opts  []ReplayOption
		want  []string
	}{
		"no topic":                   {"", nil, []string{"dlq: replay: no DLQ topic given: name the topic"}},
		"a negative rate":            {"jobs.dlq", []ReplayOption{ReplayRate(-1)}, []string{"ReplayRate(-1): want 0 (no cap) or a positive number"}},
		"an infinite rate":           {"jobs.dlq", []ReplayOption{ReplayRate(math.Inf(1))}, []string{"ReplayRate(+Inf)"}},
		"a negative produce timeout": {"jobs.dlq", []ReplayOption{ReplayProduceTimeout(-time.Second)}, []string{"ReplayProduceTimeout(-1s): want a positive duration"}},
		"a nil option":               {"jobs.dlq", []ReplayOption{ReplayForce(), nil}, []string{"nil ReplayOption (option 1)"}},
		"every wrong option at once": {"", []ReplayOption{ReplayRate(-1), ReplayProduceTimeout(-time.Second)},
			[]string{"no DLQ topic", "ReplayRate(-1)", "ReplayProduceTimeout(-1s)"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Replay(context.Background(), cl, c.topic, c.opts...)
			if err == nil {
				t.Fatal("Replay took the options")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestReplayDefaults: a replay without options has the documented
// defaults.
func TestReplayDefaults(t *testing.T) {
	t.Parallel()
	c := replayConfigFor(t, "jobs.dlq")
	if c.Group != ReplayGroup("jobs.dlq", Filter{}) || c.ProduceTimeout != ProduceTimeoutDefault || c.Logger != slog.Default() ||
		c.Rate != 0 || c.DryRun || c.Force || c.OnRecord != nil {
		t.Errorf("defaults: %+v", c)
	}
	f := Filter{Reason: handler.ReasonDecode}
	c = replayConfigFor(t, "jobs.dlq", ReplayFilter(f), ReplayRate(5), ReplayDryRun(), ReplayForce(),
		ReplayProduceTimeout(time.Second), ReplayProgressGroup("mine"))
	if c.Group != "mine" || c.Rate != 5 || !c.DryRun || !c.Force || c.ProduceTimeout != time.Second || c.Filter.Reason != handler.ReasonDecode {
		t.Errorf("options: %+v", c)
	}
	if g := replayConfigFor(t, "jobs.dlq", ReplayFilter(f)).Group; g != ReplayGroup("jobs.dlq", f) {
		t.Errorf("the default group of a filtered replay is %q, want ReplayGroup's %q", g, ReplayGroup("jobs.dlq", f))
	}
}

func TestReplayGroupNames(t *testing.T) {
	t.Parallel()
	if g := ReplayGroup("a.dlq", Filter{}); g != "shareq-dlq-replay.a.dlq" {
		t.Errorf("zero filter: %q", g)
	}
	f1 := ReplayGroup("a.dlq", Filter{Reason: "decode", Partitions: []int32{2, 1}})
	f2 := ReplayGroup("a.dlq", Filter{Reason: "decode", Partitions: []int32{1, 2, 2}})
	f3 := ReplayGroup("a.dlq", Filter{Reason: "panic"})
	if f1 != f2 || f1 == f3 || !strings.HasPrefix(f1, "shareq-dlq-replay.a.dlq.") {
		t.Errorf("groups %q %q %q", f1, f2, f3)
	}
}

func TestFilterParkedTimeAndText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	p := &Parked{Envelope: Envelope{Reason: "permanent", SourceTopic: "jobs", ParkedAt: at, Error: "image: Bad Header"}}
	p.Value = []byte(`{"url":"https://example.com/cat.PNG"}`)
	for _, tc := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{ParkedFrom: at}, true},
		{Filter{ParkedFrom: at.Add(time.Nanosecond)}, false},
		{Filter{ParkedTo: at}, false},
		{Filter{ParkedTo: at.Add(time.Nanosecond)}, true},
		{Filter{ParkedFrom: at.Add(-time.Hour), ParkedTo: at.Add(time.Hour)}, true},
		{Filter{Text: "bad header"}, true},
		{Filter{Text: "cat.png"}, true},
		{Filter{Text: "dog"}, false},
		{Filter{Text: "bad", Reason: "decode"}, false},
	} {
		if got := tc.f.matches(p); got != tc.want {
			t.Errorf("%s: matches %v, want %v", tc.f.String(), got, tc.want)
		}
		if tc.f.String() != "all" && !tc.f.byEnvelope() {
			t.Errorf("%s: byEnvelope false", tc.f.String())
		}
	}
	g := ReplayGroup("a.dlq", Filter{Text: "x"})
	if g == ReplayGroup("a.dlq", Filter{Text: "y"}) || g == ReplayGroup("a.dlq", Filter{ParkedFrom: at}) || g == ReplayGroup("a.dlq", Filter{}) {
		t.Errorf("filters by text and time share a progress group: %q", g)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 9)
	ctx := context.Background()
	// A record that is not an envelope.
	if err := b.cl.ProduceSync(ctx, &kgo.Record{Topic: "jobs.dlq", Partition: 0, Value: []byte(strings.Repeat("x", 1000))}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	all, err := List(ctx, b.cl, "jobs.dlq", Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10 {
		t.Fatalf("List returned %d, want 10", len(all))
	}
	malformed := 0
	for i, p := range all {
		if i > 0 && (p.Partition < all[i-1].Partition || p.Partition == all[i-1].Partition && p.Offset <= all[i-1].Offset) {
			t.Errorf("entry %d out of order", i)
		}
		if p.Err != nil {
			malformed++
			if !errors.Is(p.Err, ErrMalformed) || len(p.Value) != PreviewBytes || p.ValueSize != 1000 {
				t.Errorf("malformed entry: err %v, value %d of %d bytes", p.Err, len(p.Value), p.ValueSize)
			}
		}
	}
	if malformed != 1 {
		t.Errorf("%d malformed entries, want 1", malformed)
	}
	decode, err := List(ctx, b.cl, "jobs.dlq", Filter{Reason: handler.ReasonDecode}, 0)
	if err != nil || len(decode) != 3 {
		t.Fatalf("List reason=decode: %d, %v", len(decode), err)
	}
	for _, p := range decode {
		if p.Reason != handler.ReasonDecode || p.Err != nil {
			t.Errorf("filtered entry %+v", p)
		}
	}
	two, err := List(ctx, b.cl, "jobs.dlq", Filter{}, 2)
	if err != nil || len(two) != 2 || two[0].Partition != all[0].Partition || two[0].Offset != all[0].Offset || two[1].Offset != all[1].Offset {
		t.Fatalf("List limit 2: %d entries, %v", len(two), err)
	}
	none, err := List(ctx, b.cl, "jobs.dlq", Filter{SourceTopic: "other"}, 0)
	if err != nil || len(none) != 0 {
		t.Fatalf("List source=other: %d, %v", len(none), err)
	}
	if _, err := List(ctx, b.cl, "missing.dlq", Filter{}, 0); !errors.Is(err, ErrNoTopic) {
		t.Fatalf("missing topic: %v", err)
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	b := setupReplay(t, 4)
	ctx := context.Background()
	all, err := List(ctx, b.cl, "jobs.dlq", Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := all[len(all)-1]
	p, err := Get(ctx, b.cl, "jobs.dlq", want.Partition, want.Offset)
	if err != nil {
		t.Fatal(err)
	}
	if p.JobID() != want.JobID() || p.Reason != want.Reason || string(p.Value) != string(want.Value) {
		t.Fatalf("Get = %+v, want %+v", p, want)
	}
	if _, err := Get(ctx, b.cl, "jobs.dlq", want.Partition, 1000); !errors.Is(err, ErrNoRecord) {
		t.Errorf("past the end: %v", err)
	}
	if _, err := Get(ctx, b.cl, "jobs.dlq", 9, 0); err == nil || !strings.Contains(err.Error(), "no partition 9") {
		t.Errorf("missing partition: %v", err)
	}
	if _, err := Get(ctx, b.cl, "nope", 0, 0); !errors.Is(err, ErrNoTopic) {
		t.Errorf("missing topic: %v", err)
	}
}

// sizeLimit passes records to p, refusing those whose value is longer
// than max as a DLQ topic's max.message.bytes would.
type sizeLimit struct {
	p   Producer
	max int
}

func (s sizeLimit) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	var out kgo.ProduceResults
	for _, r := range rs {
		if len(r.Value) > s.max {
			out = append(out, kgo.ProduceResult{Record: r, Err: kerr.MessageTooLarge})
			continue
		}
		out = append(out, s.p.ProduceSync(ctx, r)...)
	}
	return out
}

// A job parked without its value is replayed with the value read back
// from its source record; one whose source record is gone is passed over
// and counted.
func TestReplayReadsOmittedValueFromSource(t *testing.T) {
	t.Parallel()
	c, cl := newCluster(t, 1, "jobs", "jobs.dlq")
	big := bytes.Repeat([]byte("b"), 500)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "jobs", Key: []byte("k0"), Value: big}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	mw, err := Middleware(sizeLimit{cl, 100}, Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 7} { // offset 7 of "jobs" does not exist
		job := &handler.Job{Topic: "jobs", Partition: 0, Offset: off, Key: []byte("k0"), Value: big, DeliveryCount: 1, DeliveryLimit: 5}
		if _, parked := handler.ParkedOf(handler.Chain(failWith(handler.Permanent(errors.New("nope"))), mw).Handle(ctx, job)); !parked {
			t.Fatalf("offset %d not parked", off)
		}
	}
	stats, err := Replay(ctx, cl, "jobs.dlq", ReplayLogger(quiet))
	if err != nil || stats.Replayed != 1 || stats.ValueGone != 1 || stats.Read != 2 {
		t.Fatalf("Replay = %+v, %v; want 2 read, 1 replayed, 1 with its value gone", stats, err)
	}
	recs := consumeAll(t, c, "jobs")
	if len(recs) != 2 || !bytes.Equal(recs[1].Value, big) || string(recs[1].Key) != "k0" {
		t.Fatalf("jobs holds %d records; want the original and its replay with the full value", len(recs))
	}
	if from, _ := header(recs[1].Headers, HeaderReplayedFrom); from != "jobs.dlq/0/0" {
		t.Errorf("replayed from %q", from)
	}
}

// replayConfigFor is the configuration Replay runs a replay of topic
// with opts in.
func replayConfigFor(t *testing.T, topic string, opts ...ReplayOption) replayConfig {
	t.Helper()
	c, err := newReplayConfig(topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
