package main

// Bad inputs a worker meets at run time, against kfake and (under make
// test's second pass) the real broker. RELIABILITY.md records what each
// test showed.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Empty and null values reach the handler as empty Job.Value and are
// accepted; a JSON handler treats an empty value as a decode failure,
// which is permanent, so the job is parked once with reason "decode".
func TestEmptyValues(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	var mu sync.Mutex
	seen := map[string]int{} // job ID → value length
	r.produce(t,
		jobRec("null-value", nil),
		jobRec("empty-value", []byte{}),
		&kgo.Record{Key: []byte("no-id-no-value")},
		jobRec("json-empty", []byte{}),
	)
	type msg struct{ N int }
	js := handler.JSON(func(ctx context.Context, job *handler.Job, m msg) error { return nil })
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if job.ID() == "json-empty" {
			return js.Handle(ctx, job)
		}
		mu.Lock()
		seen[job.ID()] = len(job.Value)
		mu.Unlock()
		return nil
	})
	stop := r.start(t, h, nil)
	waitFor(t, 30*time.Second, "4 jobs accepted", func() bool { return r.obs.Count(worker.AckAccept) >= 4 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"null-value", "empty-value", r.topic + "/0/2"}
	for _, id := range want {
		if n, ok := seen[id]; !ok || n != 0 {
			t.Errorf("job %q: seen %v, value length %d; want seen with an empty value (seen: %v)", id, ok, n, seen)
		}
	}
	ps := r.parked(t)
	if len(ps) != 1 || ps[0].JobID() != "json-empty" || ps[0].Reason != handler.ReasonDecode || ps[0].ValueSize != 0 {
		t.Fatalf("DLQ = %+v; want json-empty parked once with reason %q and an empty value", ps, handler.ReasonDecode)
	}
	if n := r.obs.Count(worker.AckRelease); n != 0 {
		t.Errorf("%d releases; empty values must not be retried:\n%s", n, describe(r.obs.Events()))
	}
}

// A record close to the broker's max.message.bytes (1 MiB + 12 by
// default) is delivered and handled. A poison job that size does not fit
// the DLQ with its envelope headers (over the DLQ topic's
// max.message.bytes, and over franz-go's default ProducerBatchMaxBytes of
// 1,000,012 already), so it is parked without its value, marked so, and a
// replay reads the value back from the source record. (Before, every park
// failed and the broker archived the job on its last delivery.)
func TestOversizedRecords(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// The producer may send what the broker accepts.
	big := r.c.Client(t, kgo.ProducerBatchMaxBytes(1_048_588))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const size = 1_048_000 // leaves room for the record's own overhead
	ok := bytes.Repeat([]byte("k"), size)
	poison := bytes.Repeat([]byte("p"), size)
	for _, rec := range []*kgo.Record{jobRec("big-ok", ok), jobRec("big-poison", poison)} {
		rec.Topic = r.topic
		if err := big.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce %d bytes: %v", size, err)
		}
	}
	// One byte over is refused at produce time, by the broker.
	over := jobRec("too-big", bytes.Repeat([]byte("x"), 1_048_588))
	over.Topic = r.topic
	if err := big.ProduceSync(ctx, over).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("producing a record over max.message.bytes: %v, want MESSAGE_TOO_LARGE", err)
	}

	var mu sync.Mutex
	got := map[string]int{}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		got[job.ID()] = len(job.Value)
		mu.Unlock()
		if job.ID() == "big-poison" {
			return handler.Permanent(errors.New("cannot handle this one"))
		}
		return nil
	})
	stop := r.start(t, h, nil)
	waitFor(t, 45*time.Second, "both big jobs accepted (one parked)", func() bool {
		return r.obs.Count(worker.AckAccept) >= 2
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	if got["big-ok"] != size || got["big-poison"] != size {
		t.Errorf("handled value sizes %v, want %d each", got, size)
	}
	mu.Unlock()
	for _, f := range r.obs.Events() {
		if f.Result.Ack != worker.AckAccept {
			t.Errorf("%s delivery %d: %v %v, want accept", f.ID, f.Count, f.Result.Ack, f.Result.Err)
		}
	}
	ps := r.parked(t)
	if len(ps) != 1 || ps[0].JobID() != "big-poison" || !ps[0].ValueOmitted || ps[0].ValueSize != size || len(ps[0].Value) != 0 {
		t.Fatalf("DLQ = %+v; want big-poison parked once without its %d-byte value", ps, size)
	}
	if !strings.Contains(r.logs.String(), "parking it without its value") {
		t.Errorf("no 'parking it without its value' log line; logs:\n%s", lastLines(r.logs.String(), 20))
	}

	// The replay reads the value back from the source record.
	stats, err := dlq.Replay(ctx, big, r.dlq, dlq.ReplayLogger(r.logger(t)))
	if err != nil || stats.Replayed != 1 || stats.ValueGone != 0 {
		t.Fatalf("Replay: %+v, %v; want 1 replayed", stats, err)
	}
	// The source topic: big-ok, big-poison and the replayed big-poison.
	replayed := 0
	for _, rec := range r.c.Consume(t, r.topic, 3) {
		var id string
		from := false
		for _, h := range rec.Headers {
			switch h.Key {
			case dlq.HeaderReplayedFrom:
				from = true
			case handler.JobIDHeader:
				id = string(h.Value)
			}
		}
		if from {
			replayed++
			if id != "big-poison" || len(rec.Value) != size {
				t.Errorf("replayed job %s with a %d-byte value, want big-poison with %d bytes", id, len(rec.Value), size)
			}
		}
	}
	if replayed != 1 {
		t.Errorf("%d replayed records in %s, want 1", replayed, r.topic)
	}
}

// Header keys and values, job IDs included, are bytes, not text. A job ID
// that is not valid UTF-8 (or holds a NUL) still makes one claim: the
// idempotency middleware hashes it into a storable key, so a second copy
// of the job is absorbed; a parked job keeps its headers byte for byte and
// dlq.Parse reads the envelope back. With SHAREQ_TEST_DATABASE_URL set
// (make test), the claims go to Postgres, whose text columns refuse
// invalid UTF-8.
func TestInvalidUTF8Headers(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	id := "id-\xff\xfe-\x00-\xc3\x28"
	oddHeaders := func(key string) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: []byte(key), Headers: []kgo.RecordHeader{
			{Key: "\xff\xfebad-key", Value: []byte("\xc3\x28 value")},
			{Key: handler.JobIDHeader, Value: []byte(id + key)},
			{Key: "", Value: nil},
		}}
	}
	okA, okB, bad := oddHeaders("ok"), oddHeaders("ok"), oddHeaders("bad")
	r.produce(t, okA, okB, bad)

	store := claimStore(t)
	var dups []string
	var mu sync.Mutex
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(func(_ *handler.Job, key string) {
		mu.Lock()
		dups = append(dups, key)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Key) == "bad" {
			return handler.Permanent(errors.New("bad job " + job.ID()))
		}
		mu.Lock()
		runs++
		mu.Unlock()
		return nil
	})
	stop := r.start(t, h, []handler.Middleware{claims})
	waitFor(t, 30*time.Second, "3 jobs accepted", func() bool { return r.obs.Count(worker.AckAccept) >= 3 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	if runs != 1 || len(dups) != 1 || !strings.HasPrefix(dups[0], "sha256:") {
		t.Errorf("ok job: ran %d times, duplicates %q; want one run, one duplicate with a hashed key", runs, dups)
	}
	mu.Unlock()
	ps := r.parked(t)
	if len(ps) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(ps))
	}
	p := ps[0]
	// The envelope's text headers are kept valid UTF-8: the invalid
	// bytes of the error text are replaced; the job's own headers are not
	// touched.
	if p.Err != nil || p.JobID() != id+"bad" || p.Reason != handler.ReasonPermanent ||
		!strings.Contains(p.Error, "bad job id-") || !utf8.ValidString(p.Error) {
		t.Errorf("parked: err %v, job ID %q, reason %q, error %q", p.Err, p.JobID(), p.Reason, p.Error)
	}
	if !slices.EqualFunc(p.Headers, bad.Headers, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
		t.Errorf("parked headers %q, want %q", p.Headers, bad.Headers)
	}
}

// claimStore returns a pgstore Store in a fresh schema when
// SHAREQ_TEST_DATABASE_URL is set, else a MemoryStore.
func claimStore(t *testing.T) idempotency.Store {
	t.Helper()
	if os.Getenv(pgtest.EnvURL) == "" {
		return idempotency.NewMemoryStore()
	}
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A topic deleted under a running worker: the worker keeps running, and
// stops cleanly when asked.
func TestTopicDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	r, resumed := deleteAndRecreate(t, 10*time.Second, false)
	t.Logf("%s: job produced to the re-created topic handled: %v; shareq poll-error log lines: %d",
		r.c.Kind, resumed, strings.Count(r.logs.String(), "poll error"))
}

// Found by the soak (RELIABILITY.md, issue 3): after its topic was
// deleted and re-created, a worker never consumed it again, because
// franz-go keeps the old topic ID ("we do not adopt the new ID, the topic
// fails with UNKNOWN_TOPIC_ID until it is purged and re-added"), and on
// Apache Kafka it logged nothing about it. The worker now watches its
// topics' IDs, says so at Error level, and purges and re-adds the topic.
func TestRecreatedTopicConsumed(t *testing.T) {
	t.Parallel()
	r, resumed := deleteAndRecreate(t, 45*time.Second, true)
	if !resumed {
		t.Errorf("the worker did not handle a job of the re-created topic within 45s")
	}
	if !strings.Contains(r.logs.String(), "topic deleted and re-created") {
		t.Errorf("the worker did not log the re-created topic:\n%s", lastLines(r.logs.String(), 20))
	}
	if ev := r.obs.TopicEvents(); !slices.Contains(ev, "recreated "+r.topic) {
		t.Errorf("topic events %v, want the re-creation of %s reported to the observer", ev, r.topic)
	}
}

// deleteAndRecreate runs a worker, deletes its topic, re-creates it and
// produces a job to it, and reports whether the worker handled that job
// within wait. With reported, it then waits for the worker's topic watch
// (every 10 s) to report the re-creation to the observer: the member
// consumes the new topic sooner than that. It fails t if the worker does
// not keep running or does not stop cleanly.
func deleteAndRecreate(t *testing.T, wait time.Duration, reported bool) (*rig, bool) {
	r := newRig(t)
	r.produce(t, jobRec("before-1", []byte("x")), jobRec("before-2", []byte("x")))
	var mu sync.Mutex
	var ran []string
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		ran = append(ran, job.ID())
		mu.Unlock()
		return nil
	})
	stop := r.start(t, h, nil)
	waitFor(t, 30*time.Second, "2 jobs accepted", func() bool { return r.obs.Count(worker.AckAccept) >= 2 })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := r.c.Admin()
	if resp, err := adm.DeleteTopics(ctx, r.topic); err != nil || resp.Error() != nil {
		t.Fatalf("delete topic: %v %v", err, resp.Error())
	}
	time.Sleep(3 * time.Second) // the member fetches a topic that is gone

	// Re-create it and produce again: the worker subscribes by name.
	var created bool
	for i := 0; i < 50 && !created; i++ {
		resp, err := adm.CreateTopic(ctx, 1, -1, nil, r.topic)
		created = err == nil && resp.Err == nil
		if !created {
			time.Sleep(200 * time.Millisecond) // deletion still in progress
		}
	}
	if !created {
		t.Fatalf("could not re-create %s", r.topic)
	}
	// A new client: the rig's has the old topic's ID cached.
	after := jobRec("after-1", []byte("x"))
	after.Topic = r.topic
	if err := r.c.Client(t).ProduceSync(ctx, after).FirstErr(); err != nil {
		t.Fatalf("produce to the re-created topic: %v", err)
	}
	deadline := time.Now().Add(wait)
	resumed := false
	for time.Now().Before(deadline) && !resumed {
		mu.Lock()
		resumed = slices.Contains(ran, "after-1")
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
	if reported {
		waitFor(t, 25*time.Second, "the re-creation reported to the observer", func() bool {
			return slices.Contains(r.obs.TopicEvents(), "recreated "+r.topic)
		})
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run after the topic was deleted: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("worker took %v to stop", d)
	}
	return r, resumed
}

// A group name that a classic consumer group already uses. Kafka keeps one
// namespace for all group types, so the share group cannot be created: Run
// must fail at start with ErrGroupNotShare. (Before 990ad41 it ran without
// error, handled nothing, and the share consumer of each of its members repeated
// ShareGroupHeartbeat in a tight loop, GROUP_ID_NOT_FOUND each time.)
func TestClassicConsumerGroupName(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.produce(t, jobRec("j", []byte("x")))
	name := kafkatest.Name(t, "classic")
	classic := r.c.Client(t, kgo.ConsumerGroup(name), kgo.ConsumeTopics(r.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for classic.PollFetches(ctx).NumRecords() == 0 && ctx.Err() == nil {
	}
	if err := classic.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("classic group commit: %v", err)
	}

	h := handler.Func(func(context.Context, *handler.Job) error { return nil })
	r.group = name
	var beats heartbeats
	w, err := worker.New(worker.Brokers(r.c.Seeds...), worker.Group(name), worker.Handle(r.topic, h),
		worker.AutoOffsetReset("earliest"), worker.Logger(r.logger(t)), worker.Observers(r.obs),
		worker.StartTimeout(10*time.Second), worker.ClientOpts(kgo.WithHooks(&beats)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	start := time.Now()
	runErr := w.Run(rctx)
	took := time.Since(start)
	t.Logf("%s: Run with a classic group's name returned after %v: %v; jobs finished: %d; ShareGroupHeartbeat responses: %d (%.0f/s); log:\n%s",
		r.c.Kind, took.Round(time.Millisecond), runErr, r.obs.Count(0), beats.n.Load(), float64(beats.n.Load())/took.Seconds(), lastLines(r.logs.String(), 8))
	if !errors.Is(runErr, worker.ErrGroupNotShare) || rctx.Err() != nil {
		t.Errorf("Run with a group name that a classic consumer group holds: %v after %v; want ErrGroupNotShare at start", runErr, took.Round(time.Millisecond))
	}
	if n := beats.n.Load(); n > 10 {
		t.Errorf("%d ShareGroupHeartbeat requests for a group that cannot be a share group", n)
	}
}

// A broker without the share-group APIs (Kafka before 4.0, or share.version
// 0), or with versions too old for the worker (Kafka 4.1 serves ShareFetch
// v1, without record_limit fetches, and ShareAcknowledge v1, without
// renewal). kfake always has them, so the test rewrites the ApiVersions
// answer; Run must fail at once with ErrShareGroupsUnsupported, saying
// what is missing. A real broker cannot be changed from here, so this runs
// on kfake only.
func TestBrokerWithoutShareGroups(t *testing.T) {
	t.Parallel()
	if kafkatest.Real() {
		t.Skip("needs kfake to rewrite its ApiVersions answer")
	}
	share := map[int16]bool{
		kmsg.ShareGroupHeartbeat.Int16(): true, kmsg.ShareGroupDescribe.Int16(): true,
		kmsg.ShareFetch.Int16(): true, kmsg.ShareAcknowledge.Int16(): true,
	}
	for _, tc := range []struct {
		name string
		edit func([]kmsg.ApiVersionsResponseApiKey) []kmsg.ApiVersionsResponseApiKey
		want string
	}{
		{"no share-group APIs", func(keys []kmsg.ApiVersionsResponseApiKey) []kmsg.ApiVersionsResponseApiKey {
			return slices.DeleteFunc(keys, func(k kmsg.ApiVersionsResponseApiKey) bool { return share[k.ApiKey] })
		}, "lacks ShareGroupHeartbeat"},
		{"Kafka 4.1 versions", func(keys []kmsg.ApiVersionsResponseApiKey) []kmsg.ApiVersionsResponseApiKey {
			for i, k := range keys {
				if k.ApiKey == kmsg.ShareFetch.Int16() || k.ApiKey == kmsg.ShareAcknowledge.Int16() {
					keys[i].MaxVersion = 1
				}
			}
			return keys
		}, "serves ShareFetch up to v1; the worker needs v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			fake := r.c.Fake()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			real, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, r.cl)
			if err != nil {
				t.Fatal(err)
			}
			keys := tc.edit(slices.Clone(real.ApiKeys))
			fake.ControlKey(kmsg.ApiVersions.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
				fake.KeepControl()
				resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
				resp.Version = req.GetVersion()
				resp.ApiKeys = slices.Clone(keys)
				resp.FinalizedFeatures = real.FinalizedFeatures
				resp.SupportedFeatures = real.SupportedFeatures
				resp.FinalizedFeaturesEpoch = real.FinalizedFeaturesEpoch
				return resp, nil, true
			})
			h := handler.Func(func(context.Context, *handler.Job) error { return nil })
			w, err := worker.New(worker.Brokers(r.c.Seeds...), worker.Group(r.group), worker.Handle(r.topic, h),
				worker.Logger(r.logger(t)), worker.StartTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			err = w.Run(ctx)
			if !errors.Is(err, worker.ErrShareGroupsUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want ErrShareGroupsUnsupported saying %q", err, tc.want)
			}
			t.Logf("Run: %v", err)
		})
	}
}

// heartbeats counts ShareGroupHeartbeat responses (a kgo.HookBrokerRead).
type heartbeats struct{ n atomic.Int64 }

func (h *heartbeats) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == kmsg.ShareGroupHeartbeat.Int16() && err == nil {
		h.n.Add(1)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
