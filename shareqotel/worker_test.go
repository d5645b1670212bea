package shareqotel_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/shareqotel/internal/oteltest"
	"github.com/shareq/shareq/worker"
)

// outcomeIs selects the process spans of topic whose outcome is outcome.
func outcomeIs(spans []sdktrace.ReadOnlySpan, topic, outcome string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range oteltest.Named(spans, "process "+topic) {
		if oteltest.Attr(s, "shareq.job.outcome").AsString() == outcome {
			out = append(out, s)
		}
	}
	return out
}

// A job parked in the DLQ and replayed: the DLQ record is produced in
// the run that parked it, and the replayed run links to both the job's
// creation and that run.
func TestParkAndReplayLinkToTheParkedRun(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	c := kafkatest.New(t)
	topic, dlqTopic, group := c.Topic(t, 1), c.Topic(t, 1), c.Group(t)

	q, err := enqueue.New(b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := b.TP.Tracer("test").Start(t.Context(), "POST /invite", trace.WithSpanKind(trace.SpanKindServer))
	id, err := q.Enqueue(ctx, topic, map[string]string{"to": "bob@"})
	request.End()
	if err != nil {
		t.Fatal(err)
	}

	park, err := dlq.Middleware(b.Tel.Producer(c.Client(t)), dlq.Topic(dlqTopic), dlq.Logger(oteltest.QuietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	var replayed atomic.Bool
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if !replayed.Load() {
			return handler.Permanent(errors.New("no such mailbox"))
		}
		return nil
	})
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, h), worker.Use(b.Tel.Middleware(), park), worker.Observers(b.Tel))
	b.WaitSpans(t, "the parked run", func(s []sdktrace.ReadOnlySpan) bool { return len(outcomeIs(s, topic, "parked")) == 1 })

	replayed.Store(true)
	if st, err := dlq.Replay(t.Context(), c.Client(t), dlqTopic, dlq.ReplayLogger(oteltest.QuietLogger())); err != nil || st.Replayed != 1 {
		t.Fatalf("Replay = %+v, %v; want 1 replayed", st, err)
	}
	spans := b.WaitSpans(t, "the replayed run", func(s []sdktrace.ReadOnlySpan) bool { return len(outcomeIs(s, topic, "succeeded")) == 1 })

	send := oteltest.Named(spans, "send "+topic)
	if len(send) != 1 || send[0].Parent().SpanID() != request.SpanContext().SpanID() {
		t.Fatalf("enqueue's send spans %s; want one, a child of the request", oteltest.Describe(send))
	}
	parked, again := outcomeIs(spans, topic, "parked")[0], outcomeIs(spans, topic, "succeeded")[0]
	if parked.Status().Code != codes.Error || oteltest.Attr(parked, "error.type").AsString() != handler.ReasonPermanent ||
		oteltest.Attr(parked, "shareq.job.parked.topic").AsString() != dlqTopic || oteltest.Attr(parked, "shareq.ack").AsString() != "accept" {
		t.Errorf("parked run: status %v, attributes %v", parked.Status(), parked.Attributes())
	}
	// The DLQ record's send: a child of the parked run, linked to the
	// job's creation.
	dsend := oteltest.Named(spans, "send "+dlqTopic)
	if len(dsend) != 1 || dsend[0].Parent().SpanID() != parked.SpanContext().SpanID() {
		t.Fatalf("DLQ send spans %s; want one, a child of the parked run", oteltest.Describe(dsend))
	}
	if _, ok := oteltest.LinkTo(dsend[0], send[0].SpanContext()); !ok {
		t.Errorf("DLQ send links %v; want the job's creation", dsend[0].Links())
	}
	for s, want := range map[sdktrace.ReadOnlySpan][]string{parked: {"created"}, again: {"created", "parked_run"}} {
		links := s.Links()
		if len(links) != len(want) {
			t.Errorf("%s links %v, want %v", oteltest.Attr(s, "shareq.job.outcome").AsString(), links, want)
			continue
		}
		for i, kind := range want {
			to := send[0].SpanContext()
			if kind == "parked_run" {
				to = parked.SpanContext()
			}
			if oteltest.LinkKind(links[i]) != kind || links[i].SpanContext.SpanID() != to.SpanID() {
				t.Errorf("%s link %d: %v, want %s to %v", oteltest.Attr(s, "shareq.job.outcome").AsString(), i, links[i], kind, to.SpanID())
			}
		}
	}
	if oteltest.Attr(again, "messaging.message.id").AsString() != id || again.Status().Code != codes.Unset {
		t.Errorf("replayed run: attributes %v, status %v", again.Attributes(), again.Status())
	}
}

// A panic is recorded with its stack; a job that ran out of its time is
// retried, marked timed out.
func TestPanicAndTimeout(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	q, err := enqueue.New(b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"panic", "slow"} {
		if _, err := q.Enqueue(t.Context(), topic, k, enqueue.Key([]byte(k))); err != nil {
			t.Fatal(err)
		}
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		switch {
		case string(job.Key) == "panic":
			panic("thumbnail: nil image")
		case job.DeliveryCount == 1:
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, h), worker.TopicJobTimeout(topic, 200*time.Millisecond),
		worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))
	spans := b.WaitSpans(t, "three runs", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 3 })

	discarded := outcomeIs(spans, topic, "discarded")
	if len(discarded) != 1 {
		t.Fatalf("discarded runs %s; want the panic's", oteltest.Describe(spans))
	}
	p := discarded[0]
	if p.Status().Code != codes.Error || oteltest.Attr(p, "error.type").AsString() != handler.ReasonPanic || oteltest.Attr(p, "shareq.ack").AsString() != "reject" {
		t.Errorf("panic run: status %v, attributes %v", p.Status(), p.Attributes())
	}
	if e, ok := oteltest.HasEvent(p, "exception"); !ok || !strings.Contains(oteltest.EventAttr(e, "exception.stacktrace").AsString(), "TestPanicAndTimeout") {
		t.Errorf("panic run: exception event %v; want one with the handler's stack", e)
	}
	retried := outcomeIs(spans, topic, "retried")
	if len(retried) != 1 || !oteltest.Attr(retried[0], "shareq.job.timed_out").AsBool() || oteltest.Attr(retried[0], "error.type").AsString() != handler.ReasonTimeout ||
		retried[0].Status().Code != codes.Error {
		t.Fatalf("retried runs %s; want the slow job's first, timed out", oteltest.Describe(retried))
	}
	ok := outcomeIs(spans, topic, "succeeded")
	if len(ok) != 1 || oteltest.Attr(ok[0], "shareq.job.timed_out").Type() != 0 || oteltest.Attr(ok[0], "shareq.delivery.count").AsInt64() != 2 {
		t.Fatalf("succeeded runs %s; want the slow job's second", oteltest.Describe(ok))
	}
	if oteltest.Attr(ok[0], "messaging.kafka.message.key").Type() != 0 {
		t.Errorf("the key is on the span without RecordKeys")
	}
}

// By default (no option, OTEL_SEMCONV_STABILITY_OPT_IN unset) a job's
// run is in the trace of the request that enqueued it: a child of the
// job's send span, linked to it too, with the span names the package
// documents and the current conventions' attributes only; a span the
// handler starts is the run's child.
func TestDefaultIsOneTraceFromEnqueueToRun(t *testing.T) {
	t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "")
	if err := os.Unsetenv("OTEL_SEMCONV_STABILITY_OPT_IN"); err != nil {
		t.Fatal(err)
	}
	b := oteltest.SetupDefaults(t)
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	q, err := enqueue.New(b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, request := b.TP.Tracer("test").Start(t.Context(), "POST /thumbnails", trace.WithSpanKind(trace.SpanKindServer))
	_, err = q.Enqueue(ctx, topic, 1, enqueue.Key([]byte("user-7")))
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	var inner trace.SpanContext
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		_, s := b.TP.Tracer("test").Start(ctx, "resize")
		inner = s.SpanContext()
		s.End()
		return nil
	})
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, h), worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))
	spans := b.WaitSpans(t, "the run", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 1 })
	sends := oteltest.Named(spans, "send "+topic)
	if len(sends) != 1 {
		t.Fatalf("spans %s; want one %q and one %q", oteltest.Describe(spans), "send "+topic, "process "+topic)
	}
	send, run := sends[0], oteltest.Named(spans, "process "+topic)[0]
	if send.Parent().SpanID() != request.SpanContext().SpanID() || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send: parent %v, kind %v; want a PRODUCER child of the request", send.Parent(), send.SpanKind())
	}
	if run.Parent().SpanID() != send.SpanContext().SpanID() || run.SpanContext().TraceID() != request.SpanContext().TraceID() || run.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("run: parent %v, trace %v, kind %v; want a CONSUMER child of the send span %v, in the request's trace", run.Parent(), run.SpanContext().TraceID(), run.SpanKind(), send.SpanContext())
	}
	if l, ok := oteltest.LinkTo(run, send.SpanContext()); !ok || oteltest.LinkKind(l) != "created" || len(run.Links()) != 1 {
		t.Errorf("run links %v; want one, to the send span", run.Links())
	}
	if resize := oteltest.Named(spans, "resize"); len(resize) != 1 || resize[0].Parent().SpanID() != run.SpanContext().SpanID() || inner.SpanID() != resize[0].SpanContext().SpanID() {
		t.Errorf("the handler's span is not a child of the run")
	}
	for key, v := range map[string]any{"messaging.operation.name": "process", "messaging.consumer.group.name": group, "messaging.kafka.offset": int64(0),
		"messaging.operation": nil, "messaging.kafka.consumer.group": nil, "messaging.kafka.message.offset": nil, "messaging.kafka.message.key": nil} {
		if got := oteltest.Attr(run, key).AsInterface(); got != v {
			t.Errorf("run: %s = %v, want %v", key, got, v)
		}
	}
}

// With LinkToJob the run is the root of a trace of its own, linked to the
// job's send span; with RecordKeys the key is on the span.
func TestLinkToJobAndRecordKeys(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t, shareqotel.LinkToJob(), shareqotel.RecordKeys())
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	q, err := enqueue.New(b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(t.Context(), topic, 1, enqueue.Key([]byte("user-7"))); err != nil {
		t.Fatal(err)
	}
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
		worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))
	spans := b.WaitSpans(t, "the run", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 1 })
	send, run := oteltest.Named(spans, "send "+topic)[0], oteltest.Named(spans, "process "+topic)[0]
	if run.Parent().IsValid() || run.SpanContext().TraceID() == send.SpanContext().TraceID() {
		t.Errorf("run: parent %v, trace %v; want the root of a trace of its own", run.Parent(), run.SpanContext().TraceID())
	}
	if l, ok := oteltest.LinkTo(run, send.SpanContext()); !ok || oteltest.LinkKind(l) != "created" || len(run.Links()) != 1 {
		t.Errorf("run links %v; want one, to the send span", run.Links())
	}
	if oteltest.Attr(run, "messaging.kafka.message.key").AsString() != "user-7" {
		t.Errorf("run attributes %v; want the key", run.Attributes())
	}
}

// renewals closes its channel at the first confirmed renewal.
type renewals struct {
	worker.NopObserver
	once sync.Once
	ch   chan struct{}
}

func (r *renewals) LockRenewed(_ *handler.Job, err error) {
	if err == nil {
		r.once.Do(func() { close(r.ch) })
	}
}

// A renewal of the lock is an event on the run's span, before its ack.
func TestLockRenewalIsAnEvent(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("long")})
	renewed := &renewals{ch: make(chan struct{})}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		select {
		case <-renewed.ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	// Renewed 200 ms after the start: the margin is the lock less that.
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, h), worker.RenewMargin(c.LockDuration-200*time.Millisecond),
		worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel, renewed))
	spans := b.WaitSpans(t, "the run", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 1 })
	run := oteltest.Named(spans, "process "+topic)[0]
	var names []string
	for _, e := range run.Events() {
		names = append(names, e.Name)
	}
	if len(names) < 2 || names[0] != "shareq.lock.renewed" || names[len(names)-1] != "shareq.ack" || oteltest.Attr(run, "shareq.job.outcome").AsString() != "succeeded" {
		t.Errorf("run events %q, outcome %v; want renewals, then the ack, succeeded", names, oteltest.Attr(run, "shareq.job.outcome"))
	}
}

// Without the Telemetry as the worker's observer, the middleware ends
// the span itself, with the handler's error.
func TestMiddlewareWithoutObserver(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	h := handler.Chain(handler.Func(func(ctx context.Context, job *handler.Job) error {
		if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
			t.Error("the handler's context has no span")
		}
		return handler.Retry("smtp", errors.New("451"))
	}), b.Tel.Middleware())
	job := &handler.Job{Topic: "mail", Group: "g", DeliveryCount: 1, Timestamp: time.Now()}
	if err := h.Handle(t.Context(), job); err == nil {
		t.Fatal("the middleware swallowed the error")
	}
	spans := b.Spans.Ended()
	if len(spans) != 1 || spans[0].SpanKind() != trace.SpanKindConsumer || spans[0].Status().Code != codes.Error || oteltest.Attr(spans[0], "error.type").AsString() != "smtp" {
		t.Fatalf("spans %s, status %v", oteltest.Describe(spans), spans[0].Status())
	}
	m := b.Metrics(t)
	if n := oteltest.HistCount(m["messaging.process.duration"], "error.type", "smtp"); n != 1 {
		t.Errorf("process.duration{error.type=smtp} count %d, want 1", n)
	}
}

// A job held through a pause and run again on the same delivery keeps
// one span, with an event for the second run, and a duration per run.
func TestPauseRerunKeepsTheSpan(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("x")})
	var runs atomic.Int32
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if runs.Add(1) == 1 {
			return handler.Unavailable("postgres", errors.New("connection refused"))
		}
		return nil
	})
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, h), worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))
	spans := b.WaitSpans(t, "the run", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 1 })
	run := oteltest.Named(spans, "process "+topic)[0]
	if _, ok := oteltest.HasEvent(run, "shareq.job.rerun"); !ok || runs.Load() != 2 || oteltest.Attr(run, "shareq.job.outcome").AsString() != "succeeded" ||
		oteltest.Attr(run, "shareq.delivery.count").AsInt64() != 1 || run.Status().Code != codes.Unset {
		t.Errorf("run: %d handler runs, events %v, attributes %v, status %v; want one span, rerun once, succeeded", runs.Load(), run.Events(), run.Attributes(), run.Status())
	}
	m := b.Metrics(t)
	if n := oteltest.HistCount(m["messaging.process.duration"], "error.type", handler.ReasonUnavailable); n != 1 {
		t.Errorf("process.duration{error.type=unavailable} count %d, want 1 (the paused run)", n)
	}
	if n := oteltest.HistCount(m["messaging.process.duration"], "messaging.destination.name", topic); n != 2 {
		t.Errorf("process.duration count %d, want 2 (a run each)", n)
	}
}

// A run is never a child of the span the worker's context holds: it is
// the child of the job's creation context by default, and the root of a
// trace of its own with LinkToJob or for a job that carries no trace
// context (the middleware spares the SDK's WithNewRoot only where the
// context holds no span).
func TestRunNeverJoinsTheWorkersTrace(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"default", "LinkToJob"} {
		var opts []shareqotel.Option
		if mode == "LinkToJob" {
			opts = append(opts, shareqotel.LinkToJob())
		}
		b := oteltest.Setup(t, opts...)
		_, request := b.TP.Tracer("test").Start(context.Background(), "request")
		request.End()
		traced := []handler.Header{{Key: "traceparent", Value: []byte("00-" + request.SpanContext().TraceID().String() + "-" + request.SpanContext().SpanID().String() + "-01")}}
		h := handler.Chain(handler.Func(func(ctx context.Context, _ *handler.Job) error { return nil }), b.Tel.Middleware())
		outer, outerSpan := b.TP.Tracer("test").Start(context.Background(), "worker")
		for where, ctx := range map[string]context.Context{"no span": t.Context(), "the worker's span": outer} {
			for what, headers := range map[string][]handler.Header{"traced job": traced, "untraced job": nil} {
				job := handler.Job{Topic: "mail", Group: "g", DeliveryCount: 1, Headers: headers}
				if err := h.Handle(ctx, &job); err != nil {
					t.Fatal(err)
				}
				spans := oteltest.Named(b.Spans.Ended(), "process mail")
				run := spans[len(spans)-1]
				name := mode + ", " + what + ", " + where
				childOfRequest := mode == "default" && what == "traced job"
				if childOfRequest && (run.Parent().SpanID() != request.SpanContext().SpanID() || run.SpanContext().TraceID() != request.SpanContext().TraceID()) {
					t.Errorf("%s: run's parent %v; want the creation %v", name, run.Parent(), request.SpanContext())
				}
				if !childOfRequest && (run.Parent().IsValid() || run.SpanContext().TraceID() == outerSpan.SpanContext().TraceID() || run.SpanContext().TraceID() == request.SpanContext().TraceID()) {
					t.Errorf("%s: run's parent %v, trace %v; want the root of a trace of its own", name, run.Parent(), run.SpanContext().TraceID())
				}
				if _, ok := oteltest.LinkTo(run, request.SpanContext()); ok != (what == "traced job") || len(run.Links()) > 1 {
					t.Errorf("%s: run's links %v; want one to the creation %v for a traced job, else none", name, run.Links(), request.SpanContext())
				}
			}
		}
		outerSpan.End()
	}
}
