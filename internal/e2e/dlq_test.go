package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// parkLog records the jobs the dlq middleware parked (its OnPark hook).
type parkLog struct {
	mu     sync.Mutex
	parked []parkEvent
	ch     chan struct{}
}

type parkEvent struct {
	id     string
	reason string
	at     time.Time
}

func newParkLog() *parkLog { return &parkLog{ch: make(chan struct{}, 1)} }

func (p *parkLog) onPark(job *handler.Job, reason string) {
	p.mu.Lock()
	p.parked = append(p.parked, parkEvent{id: job.ID(), reason: reason, at: time.Now()})
	p.mu.Unlock()
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

func (p *parkLog) snapshot() []parkEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]parkEvent(nil), p.parked...)
}

// parkMiddleware returns dlq.Middleware producing with a client of its own
// to "<topic>.dlq", which it creates.
func (e *env) parkMiddleware(t *testing.T, pl *parkLog) (handler.Middleware, string) {
	t.Helper()
	dlqTopic := e.topic + dlq.TopicSuffix
	e.c.CreateTopic(t, dlqTopic, 1)
	mw, err := dlq.Middleware(e.c.Client(t), dlq.Logger(shareqtest.Logger()), dlq.OnPark(pl.onPark))
	if err != nil {
		t.Fatalf("dlq.Middleware: %v", err)
	}
	return mw, dlqTopic
}

// readTopic returns every record of topic up to its high-water marks at
// the call, read with a client of its own.
func readTopic(t *testing.T, e *env, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := e.c.Admin().ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.Seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, len(out), want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func headerValue(hs []kgo.RecordHeader, key string) (string, bool) {
	v, ok := "", false
	for _, h := range hs {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

// envelopeHeaders are the shareq-dlq- headers every parked record carries
// (the stack only when the handler panicked).
var envelopeHeaders = []string{
	dlq.HeaderVersion, dlq.HeaderReason, dlq.HeaderError, dlq.HeaderDeliveryCount,
	dlq.HeaderSourceTopic, dlq.HeaderSourcePartition, dlq.HeaderSourceOffset, dlq.HeaderGroup,
	dlq.HeaderEnqueuedAt, dlq.HeaderFirstAttemptAt, dlq.HeaderLastAttemptAt, dlq.HeaderWorkerHost,
	dlq.HeaderParkedAt,
}

// parkedRecord reads the DLQ topic, which must hold exactly one record,
// checks it carries every envelope header and the job's own ones, and
// returns it parsed.
func parkedRecord(t *testing.T, e *env, dlqTopic string, src *kgo.Record) dlq.Parked {
	t.Helper()
	recs := readTopic(t, e, dlqTopic)
	if len(recs) != 1 {
		t.Fatalf("%s holds %d records, want 1", dlqTopic, len(recs))
	}
	r := recs[0]
	for _, h := range envelopeHeaders {
		if _, ok := headerValue(r.Headers, h); !ok {
			t.Errorf("parked record lacks header %s; it has %v", h, r.Headers)
		}
	}
	p, err := dlq.Parse(r)
	if err != nil {
		t.Fatalf("dlq.Parse: %v", err)
	}
	if string(p.Key) != string(src.Key) || string(p.Value) != string(src.Value) {
		t.Errorf("parked key %q value %q, want %q %q", p.Key, p.Value, src.Key, src.Value)
	}
	if id, _ := headerValue(p.Headers, handler.JobIDHeader); id != string(src.Key) || p.JobID() != string(src.Key) {
		t.Errorf("parked job ID header %q, JobID %q, want %q", id, p.JobID(), src.Key)
	}
	if p.SourceTopic != e.topic || p.SourcePartition != src.Partition || p.SourceOffset != src.Offset {
		t.Errorf("parked source %s/%d/%d, want %s/%d/%d", p.SourceTopic, p.SourcePartition, p.SourceOffset,
			e.topic, src.Partition, src.Offset)
	}
	if p.Group != e.group {
		t.Errorf("parked group %q, want %q", p.Group, e.group)
	}
	// Kafka keeps record timestamps in milliseconds.
	if enq := time.UnixMilli(src.Timestamp.UnixMilli()); !p.EnqueuedAt.Equal(enq) {
		t.Errorf("parked EnqueuedAt %v, want the source record's timestamp %v", p.EnqueuedAt, enq)
	}
	host, _ := os.Hostname()
	if p.WorkerHost != host {
		t.Errorf("parked WorkerHost %q, want %q", p.WorkerHost, host)
	}
	if p.Stack != "" {
		t.Errorf("parked Stack %q, want none (no panic)", p.Stack)
	}
	if p.LastAttemptAt.Before(p.FirstAttemptAt) || p.ParkedAt.Before(p.LastAttemptAt) {
		t.Errorf("parked times out of order: first attempt %v, last attempt %v, parked %v",
			p.FirstAttemptAt, p.LastAttemptAt, p.ParkedAt)
	}
	return p
}

// A job that always fails with a retryable error sits at the head of a
// one-partition topic, with 50 good jobs behind it. It is delivered
// exactly the delivery limit times, parked in the DLQ on the last one
// with a complete envelope, and accepted; meanwhile the good jobs behind it
// all finish (a share group does not block a partition behind a failing
// record). Once the cause is fixed, dlq.Replay sends it back to its topic
// once, where it runs once more and succeeds. Replaying again adds nothing:
// a resumed replay finds nothing new, and a replay started over re-produces
// the job, whose claim (keyed on its shareq-job-id) accepts it without
// running it.
func TestPoisonJobParkedAndReplayed(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	limit := e.c.DeliveryLimit
	const good = 50
	recs := e.produce(t, append([]string{"poison"}, ids(good)...)...)
	poisonRec := recs[0]

	// The poison job fails at once, every time. The worker's default retry
	// backoff holds it 1, 2, 4 and 8 s (±20%) before its deliveries 2 to
	// 5, so it is outstanding for 12 to 18 s, its lock renewed while held,
	// while the good jobs flow past it in the other slots.
	poisonErr := errors.New("thumbnails: image poison: decoder gave up on frame 3")
	var fixed atomic.Bool
	var mu sync.Mutex
	var attemptStarts []time.Time
	th := newThumbnailer(10 * time.Millisecond)
	th.fail = func(job *handler.Job) error {
		if job.ID() != "poison" || fixed.Load() {
			return nil
		}
		mu.Lock()
		attemptStarts = append(attemptStarts, time.Now())
		mu.Unlock()
		return poisonErr
	}
	pl := newParkLog()
	park, dlqTopic := e.parkMiddleware(t, pl)
	var dups atomic.Int64
	pool := e.db.connect(t, "", 8)
	workerStart := time.Now()
	e.start(t, th, worker.Use(park, claimsMiddleware(t, pool, &dups)), worker.Concurrency(4))

	es := e.obs.WaitFor(t, 60*time.Second, "the poison job parked and the good jobs done", func(es []event) bool {
		return len(acked(es)) == good+1
	})
	parked := pl.snapshot()
	if len(parked) != 1 || parked[0].id != "poison" || parked[0].reason != handler.ReasonDeliveryLimit {
		t.Fatalf("parked %v, want the poison job once with reason %s", parked, handler.ReasonDeliveryLimit)
	}
	parkedAt := parked[0].at
	// The worker reports the park as its own outcome, never as a success:
	// retried on the earlier deliveries, parked (and ACCEPTed) on the last.
	for _, ev := range es {
		want := worker.OutcomeSucceeded
		if ev.Key == "poison" {
			want = worker.OutcomeRetried
			if int(ev.Count) == limit {
				want = worker.OutcomeParked
			}
		}
		if ev.Result.Outcome != want {
			t.Errorf("%s delivery %d: outcome %v (ack %v), want %v", ev.Key, ev.Count, ev.Result.Outcome, ev.Result.Ack, want)
		}
		if want == worker.OutcomeParked && (ev.Result.Ack != worker.AckAccept || ev.Result.Parked == nil ||
			ev.Result.Parked.Topic != dlqTopic || ev.Result.Parked.Reason != handler.ReasonDeliveryLimit || !errors.Is(ev.Result.Err, poisonErr)) {
			t.Errorf("parked delivery reported as %+v (parked %+v)", ev.Result, ev.Result.Parked)
		}
	}

	// Delivered exactly limit times, the last one parked and accepted.
	var poisonAcks []string
	var lastGood time.Time
	for _, ev := range es {
		if ev.ID == "poison" {
			poisonAcks = append(poisonAcks, fmt.Sprintf("%v#%d", ev.Result.Ack, ev.Count))
		} else if ev.Result.Ack == worker.AckAccept && ev.At.After(lastGood) {
			lastGood = ev.At
		}
	}
	var want []string
	for i := 1; i < limit; i++ {
		want = append(want, fmt.Sprintf("%v#%d", worker.AckRelease, i))
	}
	want = append(want, fmt.Sprintf("%v#%d", worker.AckAccept, limit))
	if !slices.Equal(poisonAcks, want) {
		t.Errorf("poison job acknowledged %v, want %v", poisonAcks, want)
	}
	if runs := th.ran("poison"); len(runs) != limit {
		t.Errorf("handler ran the poison job %d times (deliveries %v), want the delivery limit %d", len(runs), runs, limit)
	}
	// The partition kept flowing: every good job finished before the
	// poison job was parked.
	if !lastGood.Before(parkedAt) {
		t.Errorf("the last good job finished %v after the poison job was parked", lastGood.Sub(parkedAt))
	}

	p := parkedRecord(t, e, dlqTopic, poisonRec)
	if p.Reason != handler.ReasonDeliveryLimit || p.Error != poisonErr.Error() || p.DeliveryCount != int32(limit) {
		t.Errorf("parked reason %q error %q delivery count %d, want %q %q %d",
			p.Reason, p.Error, p.DeliveryCount, handler.ReasonDeliveryLimit, poisonErr, limit)
	}
	mu.Lock()
	first, last := attemptStarts[0], attemptStarts[len(attemptStarts)-1]
	mu.Unlock()
	// The worker that parked the job saw all its attempts, so the first
	// attempt time is exact (not the enqueue time, which is earlier than
	// the worker's start).
	if p.FirstAttemptAt.Before(workerStart) || p.FirstAttemptAt.After(first) {
		t.Errorf("parked FirstAttemptAt %v, want between the worker's start %v and the first attempt's %v",
			p.FirstAttemptAt, workerStart, first)
	}
	if p.LastAttemptAt.Before(last) || p.ParkedAt.After(parkedAt) {
		t.Errorf("parked LastAttemptAt %v, ParkedAt %v: want after the last attempt's start %v and before OnPark at %v",
			p.LastAttemptAt, p.ParkedAt, last, parkedAt)
	}
	if n := e.db.rowsPerJob(t)["poison"]; n != 0 {
		t.Errorf("the failing poison job left %d rows, want 0", n)
	}
	t.Logf("%s: limit %d; poison ran %d times and was parked %v after its first attempt; %d good jobs, the last done %v before the park",
		e.c.Kind, limit, len(th.ran("poison")), parkedAt.Sub(first).Round(time.Millisecond), good, parkedAt.Sub(lastGood).Round(time.Millisecond))

	// Fix the cause and replay.
	fixed.Store(true)
	var replayGroups []string // the replays' progress groups, deleted at the end
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = e.c.Admin().DeleteGroups(ctx, replayGroups...)
	})
	replay := func(opts ...dlq.ReplayOption) dlq.ReplayStats {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		st, err := dlq.Replay(ctx, e.c.Client(t), dlqTopic, append(opts, dlq.ReplayLogger(shareqtest.Logger()))...)
		if err != nil {
			t.Fatalf("dlq.Replay: %v", err)
		}
		if !slices.Contains(replayGroups, st.Group) {
			replayGroups = append(replayGroups, st.Group)
		}
		return st
	}
	poisonCopies := func() []*kgo.Record {
		var out []*kgo.Record
		for _, r := range readTopic(t, e, e.topic) {
			if id, _ := headerValue(r.Headers, handler.JobIDHeader); id == "poison" {
				out = append(out, r)
			}
		}
		return out
	}
	acceptedReplays := func(es []event) int {
		n := 0
		for _, ev := range es {
			if ev.ID == "poison" && ev.Count == 1 && ev.Result.Ack == worker.AckAccept {
				n++
			}
		}
		return n
	}

	if st := replay(); st.Replayed != 1 || st.Read != 1 {
		t.Fatalf("first replay: read %d, replayed %d, want 1 and 1", st.Read, st.Replayed)
	}
	e.obs.WaitFor(t, 60*time.Second, "the replayed job accepted", func(es []event) bool { return acceptedReplays(es) == 1 })
	runs := th.ran("poison")
	if len(runs) != limit+1 || runs[limit] != 1 {
		t.Errorf("handler ran the poison job on deliveries %v, want %d failures and one more run on delivery 1 of the replayed record", runs, limit)
	}
	if n := e.db.rowsPerJob(t)["poison"]; n != 1 {
		t.Errorf("after the replay the poison job has %d rows, want 1", n)
	}
	copies := poisonCopies()
	if len(copies) != 2 {
		t.Fatalf("%s holds %d copies of the poison job after one replay, want 2 (the original and the replay)", e.topic, len(copies))
	}
	if from, _ := headerValue(copies[1].Headers, dlq.HeaderReplayedFrom); from != p.Location() {
		t.Errorf("replayed record's %s = %q, want %q", dlq.HeaderReplayedFrom, from, p.Location())
	}

	// Replaying again resumes from the saved progress: nothing new.
	second := replay()
	if second.Replayed != 0 {
		t.Errorf("second replay replayed %d jobs, want 0", second.Replayed)
	}
	if n := len(poisonCopies()); n != 2 {
		t.Errorf("after the second replay %s holds %d copies of the poison job, want 2", e.topic, n)
	}
	// A replay started over (another progress group) finds the job's
	// replay marker and passes it over: each parked job is replayed once.
	if st := replay(dlq.ReplayProgressGroup(kafkatest.Name(t, "replay"))); st.Replayed != 0 || st.AlreadyReplayed != 1 {
		t.Fatalf("replay started over replayed %d jobs and passed over %d as replayed, want 0 and 1", st.Replayed, st.AlreadyReplayed)
	}
	if n := len(poisonCopies()); n != 2 {
		t.Errorf("after the replay started over %s holds %d copies of the poison job, want 2", e.topic, n)
	}
	// Forced, it produces the job again; its claim makes it a duplicate.
	if st := replay(dlq.ReplayProgressGroup(kafkatest.Name(t, "forced")), dlq.ReplayForce()); st.Replayed != 1 {
		t.Fatalf("forced replay replayed %d jobs, want 1", st.Replayed)
	}
	e.obs.WaitFor(t, 60*time.Second, "the second replayed copy accepted", func(es []event) bool { return acceptedReplays(es) == 2 })
	if runs := th.ran("poison"); len(runs) != limit+1 {
		t.Errorf("a replayed duplicate ran the handler: deliveries %v", runs)
	}
	if dups.Load() != 1 {
		t.Errorf("OnDuplicate called %d times, want 1 (the forced replay)", dups.Load())
	}
	var jobs, markers int
	for _, r := range readTopic(t, e, dlqTopic) {
		if dlq.IsMarker(r) {
			markers++
		} else {
			jobs++
		}
	}
	if jobs != 1 || markers != 2 {
		t.Errorf("%s holds %d parked jobs and %d replay markers at the end, want 1 and 2 (one per replay)", dlqTopic, jobs, markers)
	}
	ids := append([]string{"poison"}, ids(good)...)
	checkOnce(t, e, ids)
	t.Logf("%s: replayed once and run once more; a resumed replay replayed %d; a replay started over was suppressed as %d duplicate",
		e.c.Kind, second.Replayed, dups.Load())
}

// A job that fails permanently is parked on its first delivery with reason
// permanent, accepted, and never delivered again; its claim and side
// effect are rolled back.
func TestPermanentFailureParkedAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	const good = 5
	recs := e.produce(t, append([]string{"bad"}, ids(good)...)...)
	badErr := handler.Permanent(errors.New("thumbnails: image bad is not an image"))
	th := newThumbnailer(0)
	th.fail = func(job *handler.Job) error {
		if job.ID() == "bad" {
			return badErr
		}
		return nil
	}
	pl := newParkLog()
	park, dlqTopic := e.parkMiddleware(t, pl)
	var dups atomic.Int64
	pool := e.db.connect(t, "", 4)
	workerStart := time.Now()
	e.start(t, th, worker.Use(park, claimsMiddleware(t, pool, &dups)), worker.Concurrency(2))

	e.obs.WaitFor(t, 60*time.Second, "every job accepted", func(es []event) bool { return len(acked(es)) == good+1 })
	// An accepted record is not delivered again: give the broker a lock
	// duration to prove it.
	time.Sleep(e.c.LockDuration + e.c.LockSweep)
	var badAcks []string
	for _, ev := range e.obs.Events() {
		if ev.ID == "bad" {
			badAcks = append(badAcks, fmt.Sprintf("%v#%d", ev.Result.Ack, ev.Count))
		}
	}
	if want := []string{worker.AckAccept.String() + "#1"}; !slices.Equal(badAcks, want) {
		t.Errorf("bad job acknowledged %v, want %v", badAcks, want)
	}
	if runs := th.ran("bad"); len(runs) != 1 {
		t.Errorf("handler ran the bad job on deliveries %v, want once", runs)
	}
	if parked := pl.snapshot(); len(parked) != 1 || parked[0].reason != handler.ReasonPermanent {
		t.Errorf("parked %v, want the bad job once with reason %s", parked, handler.ReasonPermanent)
	}
	p := parkedRecord(t, e, dlqTopic, recs[0])
	if p.Reason != handler.ReasonPermanent || p.Error != badErr.Error() || p.DeliveryCount != 1 {
		t.Errorf("parked reason %q error %q delivery count %d, want %q %q 1", p.Reason, p.Error, p.DeliveryCount,
			handler.ReasonPermanent, badErr)
	}
	if p.FirstAttemptAt.Before(workerStart) {
		t.Errorf("parked FirstAttemptAt %v is before the worker started (%v)", p.FirstAttemptAt, workerStart)
	}
	rows := e.db.rowsPerJob(t)
	if rows["bad"] != 0 {
		t.Errorf("the bad job left %d rows, want 0", rows["bad"])
	}
	for _, id := range ids(good) {
		if rows[id] != 1 {
			t.Errorf("job %s has %d rows, want 1", id, rows[id])
		}
	}
	if n := e.db.claims(t); n != good {
		t.Errorf("%d claims, want %d (the bad job's claim rolled back)", n, good)
	}
	t.Logf("%s: permanent failure parked on delivery %d with reason %s", e.c.Kind, p.DeliveryCount, p.Reason)
}
