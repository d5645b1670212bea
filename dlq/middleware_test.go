package dlq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/logbuf"
)

func TestMiddlewareValidation(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	tests := []struct {
		name string
		p    Producer
		opts []Option
		want string // substring of the error; "" for none
	}{
		{"defaults", p, nil, ""},
		{"all options", p, []Option{Topic("dead"), ProduceTimeout(time.Second), MaxErrorLength(100),
			MaxStackLength(100), Redact(func(error) string { return "x" }), OnPark(func(*handler.Job, string) {}),
			Logger(slog.Default()), TrackFirstAttempts(0)}, ""},
		{"topic func", p, []Option{TopicFunc(func(*handler.Job) string { return "d" })}, ""},
		{"nil producer", nil, nil, "producer is nil"},
		{"nil option", p, []Option{nil}, "nil option"},
		{"empty topic", p, []Option{Topic("")}, `Topic("")`},
		{"spaced topic", p, []Option{Topic(" dead")}, "surrounding spaces"},
		{"topic and func", p, []Option{Topic("a"), TopicFunc(func(*handler.Job) string { return "b" })}, "not both"},
		{"nil topic func", p, []Option{TopicFunc(nil)}, "TopicFunc: function is nil"},
		{"nil park hook", p, []Option{OnPark(func(*handler.Job, string) {}, nil)}, "OnPark: function 1 is nil"},
		{"zero timeout", p, []Option{ProduceTimeout(0)}, "ProduceTimeout(0s)"},
		{"tiny error length", p, []Option{MaxErrorLength(10)}, "MaxErrorLength(10)"},
		{"tiny stack length", p, []Option{MaxStackLength(10)}, "MaxStackLength(10)"},
		{"negative tracking", p, []Option{TrackFirstAttempts(-1)}, "TrackFirstAttempts(-1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mw, err := Middleware(tt.p, tt.opts...)
			if tt.want == "" {
				if err != nil || mw == nil {
					t.Fatalf("Middleware: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "dlq: ") {
				t.Fatalf("Middleware error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// wantParked fails t unless err is the middleware's word that it parked
// the job (a *handler.ParkedError).
func wantParked(t *testing.T, err error) {
	t.Helper()
	if _, ok := handler.ParkedOf(err); !ok {
		t.Fatalf("Handle = %v, want a *handler.ParkedError", err)
	}
}

// park runs job through h wrapped in a middleware made with opts and a
// fake producer, and returns the result and what was produced.
func park(t *testing.T, h handler.Handler, job *handler.Job, opts ...Option) (error, *fakeProducer) {
	t.Helper()
	p := &fakeProducer{}
	mw, err := Middleware(p, append([]Option{Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return handler.Chain(h, mw).Handle(context.Background(), job), p
}

func TestMiddlewareParksPermanentFailureOnKafka(t *testing.T) {
	t.Parallel()
	c, cl := newCluster(t, 1, "jobs", "jobs.dlq")
	var parkedReason atomic.Value
	var hooks atomic.Int32
	// OnPark twice, and two hooks in one: every hook is called.
	mw, err := Middleware(cl, OnPark(func(_ *handler.Job, reason string) { parkedReason.Store(reason); hooks.Add(1) }),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		OnPark(func(*handler.Job, string) { hooks.Add(1) }, func(*handler.Job, string) { hooks.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	job := testJob(42, 2, handler.Header{Key: handler.JobIDHeader, Value: []byte("job-7")}, handler.Header{Key: "trace", Value: []byte("t1")})
	before := time.Now()
	cause := handler.Permanent(errors.New("bad address"))
	err = handler.Chain(failWith(cause), mw).Handle(context.Background(), job)
	if _, parked := handler.ParkedOf(err); !parked {
		t.Fatalf("Handle = %v, want a ParkedError after parking", err)
	}
	if got := parkedReason.Load(); got != handler.ReasonPermanent {
		t.Errorf("OnPark reason = %v, want %q", got, handler.ReasonPermanent)
	}
	if n := hooks.Load(); n != 3 {
		t.Errorf("%d OnPark hooks called, want 3", n)
	}
	recs := consumeAll(t, c, "jobs.dlq")
	if len(recs) != 1 {
		t.Fatalf("DLQ has %d records, want 1", len(recs))
	}
	r := recs[0]
	// The park is returned to the worker, with where the broker put the
	// DLQ record.
	note, ok := handler.ParkedOf(err)
	if !ok || note.Topic != "jobs.dlq" || note.Partition != r.Partition || note.Offset != r.Offset ||
		note.Reason != handler.ReasonPermanent || !errors.Is(note.Err, cause) {
		t.Errorf("park note = %+v (noted %v), want jobs.dlq/%d/%d, reason permanent, the handler's error", note, ok, r.Partition, r.Offset)
	}
	if string(r.Key) != "key" || string(r.Value) != `{"n":1}` {
		t.Errorf("DLQ record key/value = %q/%q", r.Key, r.Value)
	}
	// The job's headers come first, unchanged.
	if r.Headers[0].Key != handler.JobIDHeader || string(r.Headers[0].Value) != "job-7" || r.Headers[1].Key != "trace" {
		t.Errorf("job headers not kept first: %v", r.Headers[:2])
	}
	host := hostname()
	want := map[string]string{
		HeaderVersion:         "1",
		HeaderReason:          "permanent",
		HeaderError:           "permanent failure (permanent): bad address",
		HeaderDeliveryCount:   "2",
		HeaderSourceTopic:     "jobs",
		HeaderSourcePartition: "1",
		HeaderSourceOffset:    "42",
		HeaderGroup:           "workers",
		HeaderEnqueuedAt:      "2026-01-02T03:04:05.0000006Z",
		HeaderFirstAttemptAt:  "2026-01-02T03:04:05.0000006Z", // delivery 2, earlier one unseen: enqueued-at
		HeaderWorkerHost:      host,
	}
	for k, v := range want {
		if got, ok := header(r.Headers, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if _, ok := header(r.Headers, HeaderStack); ok {
		t.Errorf("stack header present without a panic")
	}
	for _, k := range []string{HeaderLastAttemptAt, HeaderParkedAt} {
		v, _ := header(r.Headers, k)
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil || ts.Before(before.Add(-time.Second)) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("header %s = %q (%v), want about now", k, v, err)
		}
	}
	p, err := Parse(r)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.Reason != "permanent" || p.SourceOffset != 42 || p.JobID() != "job-7" || len(p.Headers) != 2 {
		t.Errorf("Parse = %+v", p)
	}
}

func TestMiddlewareParksOnLastDelivery(t *testing.T) {
	t.Parallel()
	base := errors.New("upstream 503")
	err, p := park(t, failWith(handler.Retry("upstream", base)), testJob(1, 5))
	wantParked(t, err)
	recs := p.produced()
	if len(recs) != 1 || recs[0].Topic != "jobs.dlq" {
		t.Fatalf("produced %v, want one record to jobs.dlq", recs)
	}
	if v, _ := header(recs[0].Headers, HeaderReason); v != handler.ReasonDeliveryLimit {
		t.Errorf("reason = %q, want %q", v, handler.ReasonDeliveryLimit)
	}
	if v, _ := header(recs[0].Headers, HeaderError); v != "retry (upstream): upstream 503" {
		t.Errorf("error = %q", v)
	}
}

// A dependency that is down is not the job's failure: the error passes
// through unchanged even on the last delivery, so the worker pauses and
// holds the job instead of it being parked.
func TestMiddlewarePassesUnavailableThroughOnLastDelivery(t *testing.T) {
	t.Parallel()
	down := handler.Unavailable("postgres", errors.New("connection refused"))
	err, p := park(t, failWith(down), testJob(5, 5))
	if err != down {
		t.Fatalf("Handle = %v, want the Unavailable error unchanged", err)
	}
	if n := len(p.produced()); n != 0 {
		t.Fatalf("produced %d records, want none", n)
	}
	// A permanent error wins over an outage it wraps.
	err, p = park(t, failWith(handler.Permanent(down)), testJob(1, 5))
	wantParked(t, err)
	if len(p.produced()) != 1 {
		t.Fatalf("permanent: produced %d; want one park", len(p.produced()))
	}
}

func TestMiddlewarePassesThroughBelowLimit(t *testing.T) {
	t.Parallel()
	base := errors.New("timeout")
	err, p := park(t, failWith(base), testJob(1, 4))
	if err != base {
		t.Fatalf("Handle = %v, want the handler's error unchanged", err)
	}
	if n := len(p.produced()); n != 0 {
		t.Fatalf("produced %d records, want none", n)
	}
}

func TestMiddlewarePassesThroughSuccess(t *testing.T) {
	t.Parallel()
	err, p := park(t, failWith(nil), testJob(1, 5))
	if err != nil || len(p.produced()) != 0 {
		t.Fatalf("Handle = %v, produced %d; want nil and none", err, len(p.produced()))
	}
}

func TestMiddlewareUnknownLimitParksOnlyPermanent(t *testing.T) {
	t.Parallel()
	job := testJob(1, 50)
	job.DeliveryLimit = 0
	base := errors.New("flaky")
	if err, _ := park(t, failWith(base), job); err != base {
		t.Fatalf("Handle = %v, want the error: the limit is unknown", err)
	}
	// A permanent failure is parked all the same.
	err, p := park(t, failWith(handler.Permanent(base)), job)
	wantParked(t, err)
	if len(p.produced()) != 1 {
		t.Fatalf("produced %d; want the permanent failure parked", len(p.produced()))
	}
}

func TestMiddlewareProduceFailureRetries(t *testing.T) {
	t.Parallel()
	for _, delivery := range []int32{1, 5} {
		p := &fakeProducer{err: errors.New("broker down")}
		log, buf := testLogger()
		mw, err := Middleware(p, Logger(log))
		if err != nil {
			t.Fatal(err)
		}
		err = handler.Chain(failWith(handler.Permanent(errors.New("nope"))), mw).Handle(context.Background(), testJob(9, delivery))
		if err == nil {
			t.Fatalf("delivery %d: Handle = nil, want a retry error: the job was not parked", delivery)
		}
		var re *handler.RetryError
		if !errors.As(err, &re) || re.Reason != "dlq-produce" || handler.IsPermanent(err) {
			t.Fatalf("delivery %d: Handle = %v, want a RetryError with reason dlq-produce", delivery, err)
		}
		if !errors.Is(err, p.err) {
			t.Errorf("delivery %d: error %v does not wrap the produce error", delivery, err)
		}
		logged := buf.String()
		if !strings.Contains(logged, "level=ERROR") || !strings.Contains(logged, "job_id=jobs/1/9") {
			t.Errorf("delivery %d: log = %q, want an error naming the job", delivery, logged)
		}
		if last := strings.Contains(logged, "LAST delivery"); last != (delivery == 5) {
			t.Errorf("delivery %d: log mentions last delivery = %v: %q", delivery, last, logged)
		}
	}
}

func TestMiddlewareOnParkNotCalledOnFailure(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{err: errors.New("down")}
	called := false
	mw, _ := Middleware(p, Logger(slog.New(slog.NewTextHandler(io.Discard, nil))), OnPark(func(*handler.Job, string) { called = true }))
	_ = handler.Chain(failWith(handler.Permanent(errors.New("x"))), mw).Handle(context.Background(), testJob(1, 1))
	if called {
		t.Fatal("OnPark called although the park failed")
	}
}

func TestMiddlewareParksAfterHandlerContextCancelled(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	mw, _ := Middleware(p, Logger(slog.New(slog.NewTextHandler(io.Discard, nil))), ProduceTimeout(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		cancel() // the worker shuts down while the job fails
		return ctx.Err()
	})
	wantParked(t, handler.Chain(h, mw).Handle(ctx, testJob(1, 5)))
	if err := p.ctxErrs[0]; err != nil {
		t.Fatalf("produce context was done (%v); parking must outlive the handler's context", err)
	}
	if dl := p.deadlines[0]; dl.IsZero() || time.Until(dl) > time.Minute {
		t.Fatalf("produce context deadline = %v; want within ProduceTimeout", dl)
	}
}

func TestMiddlewarePanicStack(t *testing.T) {
	t.Parallel()
	stack := "goroutine 7 [running]:\nmain.handle()\n\t/src/main.go:12\n" + strings.Repeat("frame\n", 100)
	perr := &handler.PermanentError{Reason: handler.ReasonPanic, Err: &handler.PanicError{Value: "boom", Stack: []byte(stack)}}
	err, p := park(t, failWith(perr), testJob(1, 1), MaxStackLength(200))
	wantParked(t, err)
	hs := p.produced()[0].Headers
	got, ok := header(hs, HeaderStack)
	if !ok || !strings.HasPrefix(got, "goroutine 7 [running]:\nmain.handle()") || len(got) > 200 || !strings.HasSuffix(got, truncated) {
		t.Fatalf("stack header = %q (len %d), want the stack's top cut to 200 bytes", got, len(got))
	}
	if v, _ := header(hs, HeaderReason); v != handler.ReasonPanic {
		t.Errorf("reason = %q, want panic", v)
	}
	if v, _ := header(hs, HeaderError); v != "permanent failure (panic): panic: boom" {
		t.Errorf("error = %q", v)
	}
}

// A panic in middleware between this one and the handler (outside the
// worker's own recovery, which wraps only the handler) is parked with its
// value and stack, not passed on as a panic.
func TestMiddlewareParksPanicOfInnerMiddleware(t *testing.T) {
	t.Parallel()
	inner := func(handler.Handler) handler.Handler {
		return handler.Func(func(context.Context, *handler.Job) error { panic("inner middleware bug") })
	}
	p := &fakeProducer{}
	mw, err := Middleware(p, Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	err = handler.Chain(failWith(nil), mw, inner).Handle(context.Background(), testJob(1, 1))
	if _, parked := handler.ParkedOf(err); !parked {
		t.Fatalf("Handle = %v, want a ParkedError after parking the panic", err)
	}
	hs := p.produced()[0].Headers
	if v, _ := header(hs, HeaderReason); v != handler.ReasonPanic {
		t.Errorf("reason = %q, want panic", v)
	}
	if v, _ := header(hs, HeaderStack); !strings.Contains(v, "middleware_test.go") {
		t.Errorf("stack header = %q, want the panicking middleware's stack", v)
	}
	var pe *handler.PanicError
	if note, ok := handler.ParkedOf(err); !ok || note.Reason != handler.ReasonPanic || !errors.As(note.Err, &pe) || pe.Value != "inner middleware bug" {
		t.Errorf("park note = %+v (noted %v), want the panic", note, ok)
	}
}

func TestMiddlewareRedact(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial postgres://app:hunter2@db/prod: refused")
	err, p := park(t, failWith(handler.Permanent(secret)), testJob(1, 1),
		Redact(func(err error) string { return strings.ReplaceAll(err.Error(), "hunter2", "***") }))
	wantParked(t, err)
	for _, h := range p.produced()[0].Headers {
		if strings.Contains(string(h.Value), "hunter2") {
			t.Fatalf("header %s leaks the secret: %q", h.Key, h.Value)
		}
	}
	if v, _ := header(p.produced()[0].Headers, HeaderError); v != "permanent failure (permanent): dial postgres://app:***@db/prod: refused" {
		t.Errorf("error = %q", v)
	}
}

func TestMiddlewareTruncatesError(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 100) // 200 bytes
	err, p := park(t, failWith(handler.Permanent(errors.New(long))), testJob(1, 1), MaxErrorLength(101))
	wantParked(t, err)
	v, _ := header(p.produced()[0].Headers, HeaderError)
	if len(v) > 101 || !strings.HasSuffix(v, truncated) || !strings.HasPrefix(v, "permanent failure") {
		t.Fatalf("error header = %q (%d bytes)", v, len(v))
	}
	if !utf8.ValidString(v) {
		t.Fatalf("error header is not valid UTF-8: %q", v)
	}
}

func TestMiddlewareKeepsJobHeadersDropsStaleEnvelope(t *testing.T) {
	t.Parallel()
	job := testJob(1, 1,
		handler.Header{Key: handler.JobIDHeader, Value: []byte("id-1")},
		handler.Header{Key: HeaderReason, Value: []byte("stale")},
		handler.Header{Key: HeaderReplayedFrom, Value: []byte("jobs.dlq/0/3")},
	)
	err, p := park(t, failWith(handler.Permanent(errors.New("x"))), job)
	wantParked(t, err)
	hs := p.produced()[0].Headers
	if n := countHeader(hs, HeaderReason); n != 1 {
		t.Errorf("%d reason headers, want 1", n)
	}
	if v, _ := header(hs, HeaderReason); v != "permanent" {
		t.Errorf("reason = %q", v)
	}
	for _, k := range []string{handler.JobIDHeader, HeaderReplayedFrom} {
		if _, ok := header(hs, k); !ok {
			t.Errorf("job header %s dropped", k)
		}
	}
}

func TestMiddlewareTopicChoice(t *testing.T) {
	t.Parallel()
	perm := failWith(handler.Permanent(errors.New("x")))
	_, p := park(t, perm, testJob(1, 1), Topic("graveyard"))
	if got := p.produced()[0].Topic; got != "graveyard" {
		t.Errorf("Topic: produced to %q", got)
	}
	_, p = park(t, perm, testJob(1, 1), TopicFunc(func(j *handler.Job) string { return "dead-" + j.Topic }))
	if got := p.produced()[0].Topic; got != "dead-jobs" {
		t.Errorf("TopicFunc: produced to %q", got)
	}
	err, p := park(t, perm, testJob(1, 1), TopicFunc(func(*handler.Job) string { return "" }))
	var re *handler.RetryError
	if !errors.As(err, &re) || len(p.produced()) != 0 {
		t.Errorf("TopicFunc returning \"\": Handle = %v, produced %d; want a retry and nothing produced", err, len(p.produced()))
	}
}

func TestMiddlewareFirstAttemptAt(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	clock := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tick := func() time.Time { clock = clock.Add(time.Second); return clock } // each reading a second later
	mw, err := Middleware(p, Logger(slog.New(slog.NewTextHandler(io.Discard, nil))), withClock(tick))
	if err != nil {
		t.Fatal(err)
	}
	flaky := handler.Chain(failWith(errors.New("flaky")), mw)
	broken := handler.Chain(failWith(handler.Permanent(errors.New("broken"))), mw)
	ok := handler.Chain(failWith(nil), mw)
	lastEnv := func() Envelope {
		t.Helper()
		recs := p.produced()
		env, err := ParseHeaders(recs[len(recs)-1].Headers)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}

	// Every delivery seen by this process: the first one's start.
	firstStart := clock.Add(time.Second)
	for d := int32(1); d <= 5; d++ {
		_ = flaky.Handle(context.Background(), testJob(7, d))
	}
	if got := lastEnv().FirstAttemptAt; !got.Equal(firstStart) {
		t.Errorf("all deliveries seen: first-attempt-at = %v, want the first delivery's start %v", got, firstStart)
	}

	// A first delivery parked at once: its own start.
	start := clock.Add(time.Second)
	_ = broken.Handle(context.Background(), testJob(8, 1))
	if got := lastEnv().FirstAttemptAt; !got.Equal(start) {
		t.Errorf("first delivery: first-attempt-at = %v, want %v", got, start)
	}

	// Earlier deliveries unseen: the enqueue time, a lower bound.
	_ = broken.Handle(context.Background(), testJob(9, 3))
	if env := lastEnv(); !env.FirstAttemptAt.Equal(env.EnqueuedAt) {
		t.Errorf("unseen deliveries: first-attempt-at = %v, want enqueued-at %v", env.FirstAttemptAt, env.EnqueuedAt)
	}

	// Parking forgets: the same job ID failing again later starts afresh.
	_ = broken.Handle(context.Background(), testJob(7, 2))
	if env := lastEnv(); !env.FirstAttemptAt.Equal(env.EnqueuedAt) {
		t.Errorf("after parking: first-attempt-at = %v, want enqueued-at", env.FirstAttemptAt)
	}

	// Success forgets too.
	_ = flaky.Handle(context.Background(), testJob(10, 1))
	_ = ok.Handle(context.Background(), testJob(10, 2))
	_ = broken.Handle(context.Background(), testJob(10, 3))
	if env := lastEnv(); !env.FirstAttemptAt.Equal(env.EnqueuedAt) {
		t.Errorf("after success: first-attempt-at = %v, want enqueued-at", env.FirstAttemptAt)
	}
}

func TestFirstSeenIsBounded(t *testing.T) {
	t.Parallel()
	f := newFirstSeen(2)
	t0 := time.Unix(0, 0)
	f.remember("a", t0)
	f.remember("a", t0.Add(time.Hour)) // keeps the earlier
	f.remember("b", t0)
	f.remember("c", t0)
	if _, ok := f.lookup("a"); ok {
		t.Error("oldest entry kept past the bound")
	}
	if at, ok := f.lookup("b"); !ok || !at.Equal(t0) {
		t.Error("b forgotten")
	}
	if f.len() != 2 {
		t.Errorf("len %d", f.len())
	}
	var none *firstSeen = newFirstSeen(0)
	none.remember("a", t0)
	if _, ok := none.lookup("a"); ok || none.len() != 0 {
		t.Error("tracking off still remembers")
	}
}

// sizeLimitProducer refuses records whose value is longer than max, as
// a broker refuses a record over the topic's max.message.bytes.
type sizeLimitProducer struct {
	fakeProducer
	max int
}

func (f *sizeLimitProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	var out kgo.ProduceResults
	for _, r := range rs {
		if len(r.Value) > f.max {
			out = append(out, kgo.ProduceResult{Record: r, Err: fmt.Errorf("%w (uncompressed_bytes=%d)", kerr.MessageTooLarge, len(r.Value))})
			continue
		}
		out = append(out, f.fakeProducer.ProduceSync(ctx, r)...)
	}
	return out
}

// A job too large for the DLQ topic is parked without its value, marked
// so, rather than released until the broker archives it.
func TestMiddlewareParksOversizedJobWithoutValue(t *testing.T) {
	t.Parallel()
	p := &sizeLimitProducer{max: 100}
	var logs logbuf.Buffer
	mw, err := Middleware(p, Logger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	job := testJob(7, 1, handler.Header{Key: "trace", Value: []byte("t1")})
	job.Value = bytes.Repeat([]byte("v"), 1000)
	wantParked(t, handler.Chain(failWith(handler.Permanent(errors.New("too big to handle"))), mw).Handle(context.Background(), job))
	recs := p.produced()
	if len(recs) != 1 {
		t.Fatalf("produced %d records, want 1", len(recs))
	}
	parked, err := Parse(recs[0])
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if !parked.ValueOmitted || parked.OmittedValueSize != 1000 || parked.ValueSize != 1000 || len(parked.Value) != 0 ||
		string(parked.Key) != "key" || parked.SourceOffset != 7 || parked.Reason != handler.ReasonPermanent || len(parked.Headers) != 1 {
		t.Errorf("parked %+v; want the job without its 1000-byte value, marked omitted", parked.Envelope)
	}
	if n := countHeader(recs[0].Headers, HeaderReason); n != 1 {
		t.Errorf("%d reason headers, want 1", n)
	}
	if !strings.Contains(logs.String(), "parking it without its value") {
		t.Errorf("no warning logged: %s", logs.String())
	}

	// A job that fits is parked whole.
	small := testJob(8, 1)
	wantParked(t, handler.Chain(failWith(handler.Permanent(errors.New("x"))), mw).Handle(context.Background(), small))
	if recs := p.produced(); len(recs) != 2 || string(recs[1].Value) != `{"n":1}` {
		t.Errorf("small job parked as %v", recs[len(recs)-1])
	} else if _, ok := header(recs[1].Headers, HeaderValueOmitted); ok {
		t.Errorf("small job marked value-omitted")
	}
}

// Without Logger the middleware logs through the logger the job's context
// carries (the worker's), parked jobs and failed parks alike.
func TestMiddlewareLogsThroughTheContextLogger(t *testing.T) {
	t.Parallel()
	log, buf := testLogger()
	ctx := handler.WithLogger(context.Background(), log)
	mw, err := Middleware(&fakeProducer{})
	if err != nil {
		t.Fatal(err)
	}
	wantParked(t, handler.Chain(failWith(handler.Permanent(errors.New("nope"))), mw).Handle(ctx, testJob(3, 1)))
	failing, err := Middleware(&fakeProducer{err: errors.New("broker down")})
	if err != nil {
		t.Fatal(err)
	}
	if err := handler.Chain(failWith(handler.Permanent(errors.New("nope"))), failing).Handle(ctx, testJob(4, 1)); err == nil || handler.IsPermanent(err) {
		t.Fatalf("Handle = %v with a failing producer, want a retry", err)
	}
	logged := buf.String()
	if !strings.Contains(logged, "dlq: parked job") || !strings.Contains(logged, "dlq: could not park job") {
		t.Errorf("the context's logger got %q; want the park and the failed park", logged)
	}
}
