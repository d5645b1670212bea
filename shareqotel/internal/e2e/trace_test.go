package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/shareqotel/internal/oteltest"
	"github.com/shareq/shareq/worker"
)

type signup struct {
	User string `json:"user"`
}

// One trace from an HTTP request through EnqueueTx, the relay, a failed
// first delivery and a successful second one.
func TestTraceThroughOutboxRelayAndRetry(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)

	// The request: a SERVER span, as an HTTP instrumentation starts, and
	// the job enqueued in the request's transaction.
	tracer := b.TP.Tracer("test")
	var jobID string
	var request trace.SpanContext
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := tracer.Start(r.Context(), "POST /signup", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		request = span.SpanContext()
		tx, err := pool.Begin(ctx)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if jobID, err = pgoutbox.EnqueueTx(ctx, tx, topic, signup{User: "ada"}, b.Tel.Inject(ctx, topic)); err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
		}
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/signup", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /signup: %s", resp.Status)
	}
	// The row holds the trace context, for the relay.
	var keys []string
	if err := pool.QueryRow(t.Context(), `SELECT header_keys FROM `+pgoutbox.Table+` WHERE job_id = $1`, jobID).Scan(&keys); err != nil {
		t.Fatal(err)
	}

	relay, err := pgoutbox.NewRelay(pool, b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)), pgoutbox.PollInterval(100*time.Millisecond), pgoutbox.Logger(oteltest.QuietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := kafkatest.Run(t, relay.Run)
	defer func() { _ = stopRelay() }()

	var logs oteltest.LogBuffer
	var runs atomic.Int32
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		handler.Logger(ctx).Info("sending the welcome mail", "delivery", job.DeliveryCount)
		if runs.Add(1) == 1 {
			return errors.New("smtp: 451 try again later")
		}
		return nil
	})
	oteltest.StartWorker(t, c, worker.Group(group), worker.Logger(slog.New(slog.NewJSONHandler(&logs, nil))),
		worker.Handle(topic, h), worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))

	process := "process " + topic
	// The relay ends its send span when the broker acknowledged the
	// record, which the worker may have consumed by then: wait for both.
	spans := b.WaitSpans(t, "two runs and the relay's send", func(s []sdktrace.ReadOnlySpan) bool {
		return oteltest.Count(s, process) == 2 && oteltest.Count(s, "send "+topic) == 1
	})
	if !strings.Contains(strings.Join(keys, ","), "traceparent") {
		t.Errorf("outbox row header_keys = %q, want a traceparent", keys)
	}

	server := oteltest.Named(spans, "POST /signup")
	creates := oteltest.Named(spans, "create "+topic)
	sends := oteltest.Named(spans, "send "+topic)
	if len(server) != 1 || len(creates) != 1 || len(sends) != 1 {
		t.Fatalf("spans: %s; want one request, one create, one send", oteltest.Describe(spans))
	}
	create, send := creates[0], sends[0]
	if create.SpanKind() != trace.SpanKindProducer || create.Parent().SpanID() != request.SpanID() || create.SpanContext().TraceID() != request.TraceID() {
		t.Errorf("create span: kind %v, parent %v; want a PRODUCER child of the request %v", create.SpanKind(), create.Parent(), request)
	}
	if oteltest.Attr(create, "messaging.operation.type").AsString() != "create" || oteltest.Attr(create, "messaging.destination.name").AsString() != topic {
		t.Errorf("create span attributes %v", create.Attributes())
	}
	// The relay's send: a PRODUCER span of its own (the relay has no
	// request), linked to the create span, with where the record went.
	if send.SpanKind() != trace.SpanKindProducer || send.SpanContext().TraceID() == request.TraceID() {
		t.Errorf("send span: kind %v, trace %v; want a PRODUCER span in the relay's own trace", send.SpanKind(), send.SpanContext().TraceID())
	}
	if l, ok := oteltest.LinkTo(send, create.SpanContext()); !ok || oteltest.LinkKind(l) != "created" {
		t.Errorf("send span links %v; want one to the create span", send.Links())
	}
	if oteltest.Attr(send, "messaging.destination.partition.id").AsString() != "0" || oteltest.Attr(send, "messaging.kafka.message.offset").AsInt64() != 0 ||
		oteltest.Attr(send, "messaging.message.id").AsString() != jobID || send.Status().Code != codes.Unset {
		t.Errorf("send span attributes %v, status %v", send.Attributes(), send.Status())
	}

	runSpans := oteltest.Named(spans, process)
	for i, want := range []struct {
		outcome, ack string
		status       codes.Code
	}{{"retried", "release", codes.Error}, {"succeeded", "accept", codes.Unset}} {
		s := runSpans[i]
		if s.SpanKind() != trace.SpanKindConsumer || s.Parent().SpanID() != create.SpanContext().SpanID() || s.SpanContext().TraceID() != request.TraceID() {
			t.Errorf("run %d: kind %v, parent %v; want a CONSUMER child of the create span, in the request's trace", i+1, s.SpanKind(), s.Parent())
		}
		if l, ok := oteltest.LinkTo(s, create.SpanContext()); !ok || oteltest.LinkKind(l) != "created" {
			t.Errorf("run %d: links %v; want one to the create span", i+1, s.Links())
		}
		for key, v := range map[string]any{
			"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.consumer.group.name": group,
			"messaging.kafka.consumer.group": group, "messaging.destination.partition.id": "0", "messaging.kafka.offset": int64(0),
			"messaging.kafka.message.offset": int64(0), "messaging.kafka.destination.partition": int64(0),
			"messaging.operation.name": "process", "messaging.operation": "process", "messaging.message.id": jobID,
			"shareq.delivery.count": int64(i + 1), "shareq.job.outcome": want.outcome, "shareq.ack": want.ack,
		} {
			if got := oteltest.Attr(s, key).AsInterface(); got != v {
				t.Errorf("run %d: %s = %v, want %v", i+1, key, got, v)
			}
		}
		if s.Status().Code != want.status {
			t.Errorf("run %d: status %v, want %v", i+1, s.Status(), want.status)
		}
		if e, ok := oteltest.HasEvent(s, "shareq.ack"); !ok || oteltest.EventAttr(e, "shareq.ack").AsString() != want.ack {
			t.Errorf("run %d: events %v; want a shareq.ack %s", i+1, s.Events(), want.ack)
		}
		// The handler's log line carries the run's trace and span IDs.
		if line := `"trace_id":"` + s.SpanContext().TraceID().String() + `","span_id":"` + s.SpanContext().SpanID().String() + `"`; !strings.Contains(logs.String(), line) {
			t.Errorf("run %d: no log line with %s in\n%s", i+1, line, logs.String())
		}
	}
	first := runSpans[0]
	if oteltest.Attr(first, "error.type").AsString() != "_OTHER" || !strings.Contains(first.Status().Description, "451") {
		t.Errorf("failed run: error.type %v, status %v", oteltest.Attr(first, "error.type"), first.Status())
	}
	if _, ok := oteltest.HasEvent(first, "exception"); !ok {
		t.Errorf("failed run: no exception event in %v", first.Events())
	}
	if _, ok := oteltest.HasEvent(runSpans[1], "exception"); ok || oteltest.Attr(runSpans[1], "error.type").Type() != 0 {
		t.Errorf("successful run has an error: %v %v", runSpans[1].Events(), runSpans[1].Attributes())
	}

	m := b.Metrics(t)
	if n := oteltest.HistCount(m["messaging.process.duration"], "messaging.destination.name", topic); n != 2 {
		t.Errorf("messaging.process.duration count = %d, want 2", n)
	}
	if n := oteltest.HistCount(m["messaging.process.duration"], "error.type", "_OTHER"); n != 1 {
		t.Errorf("messaging.process.duration{error.type=_OTHER} count = %d, want 1 (the failed run)", n)
	}
	if n := oteltest.SumWith(m["messaging.client.consumed.messages"], "shareq.job.outcome", "succeeded"); n != 1 {
		t.Errorf("consumed{outcome=succeeded} = %d, want 1", n)
	}
	if n := oteltest.HistCount(m["shareq.job.wait"], "messaging.consumer.group.name", group); n != 1 {
		t.Errorf("shareq.job.wait count = %d, want 1 (the first delivery)", n)
	}
}

// A job enqueued without a trace context (a scheduler's firing, a job for
// later) gets the relay's: its run links to the relay's send span.
func TestRelayGivesItsContextToAJobWithoutOne(t *testing.T) {
	t.Parallel()
	b := oteltest.Setup(t)
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, signup{User: "cron"}), pgoutbox.In(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	relay, err := pgoutbox.NewRelay(pool, b.Tel.Producer(c.Client(t, enqueue.ProducerOpts()...)), pgoutbox.PollInterval(100*time.Millisecond), pgoutbox.Logger(oteltest.QuietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := kafkatest.Run(t, relay.Run)
	defer func() { _ = stopRelay() }()
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
		worker.Use(b.Tel.Middleware()), worker.Observers(b.Tel))
	// The relay ends its send span when the broker acknowledged the
	// record, which the worker may have consumed by then: wait for both.
	spans := b.WaitSpans(t, "the run and the relay's send", func(s []sdktrace.ReadOnlySpan) bool {
		return oteltest.Count(s, "process "+topic) == 1 && oteltest.Count(s, "send "+topic) == 1
	})
	sends := oteltest.Named(spans, "send "+topic)
	if len(sends) != 1 || len(sends[0].Links()) != 0 || oteltest.Attr(sends[0], "messaging.message.id").AsString() != res.ID {
		t.Fatalf("send spans %s; want the relay's one, linked to nothing", oteltest.Describe(sends))
	}
	run := oteltest.Named(spans, "process "+topic)[0]
	if l, ok := oteltest.LinkTo(run, sends[0].SpanContext()); !ok || oteltest.LinkKind(l) != "created" {
		t.Errorf("run links %v; want the relay's send span", run.Links())
	}
}
