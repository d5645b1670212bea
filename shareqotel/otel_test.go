package shareqotel_test

import (
	"context"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/shareqotel/internal/oteltest"
)

// acked is an enqueue.Producer that acknowledges every record at once,
// at offset 0 of partition 0.
type acked struct{}

func (acked) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	res := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		res[i] = kgo.ProduceResult{Record: r}
	}
	return res
}

// spansOfAJob returns the spans of one job's life with tel: its creation
// (Inject), its send (Producer) and a run (Middleware), in that order.
func spansOfAJob(t *testing.T, tel *shareqotel.Telemetry, spans *tracetest.SpanRecorder) (create, send, run sdktrace.ReadOnlySpan) {
	t.Helper()
	if _, err := enqueue.NewJob("jobs", 1, tel.Inject(t.Context(), "jobs")).Record(); err != nil {
		t.Fatal(err)
	}
	q, err := enqueue.New(tel.Producer(acked{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(t.Context(), "jobs", 1); err != nil {
		t.Fatal(err)
	}
	h := handler.Chain(handler.Func(func(context.Context, *handler.Job) error { return nil }), tel.Middleware())
	if err := h.Handle(t.Context(), &handler.Job{Topic: "jobs", Group: "g", DeliveryCount: 1}); err != nil {
		t.Fatal(err)
	}
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("spans %s, want create, send, process", oteltest.Describe(ended))
	}
	return ended[0], ended[1], ended[2]
}

// The span names and the attributes' names the package documents: the
// current conventions' by default (with OTEL_SEMCONV_STABILITY_OPT_IN
// unset, or set to anything but messaging/dup), both sets of attributes
// with messaging/dup, semconv v1.24's with SemconvOld.
func TestSemconvStabilityOptIn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    *string // nil: unset
		opts   []shareqotel.Option
		create string
		send   string
		run    string
		old    bool
		cur    bool
	}{
		{name: "unset", create: "create jobs", send: "send jobs", run: "process jobs", cur: true},
		{name: "http", env: ptr("http"), create: "create jobs", send: "send jobs", run: "process jobs", cur: true},
		{name: "messaging", env: ptr("messaging"), create: "create jobs", send: "send jobs", run: "process jobs", cur: true},
		{name: "http, messaging/dup", env: ptr("http, messaging/dup"), create: "create jobs", send: "send jobs", run: "process jobs", old: true, cur: true},
		{name: "messaging,messaging/dup", env: ptr("messaging,messaging/dup"), create: "create jobs", send: "send jobs", run: "process jobs", old: true, cur: true},
		{name: "SemconvOld", env: ptr("messaging/dup"), opts: []shareqotel.Option{shareqotel.SemanticConventions(shareqotel.SemconvOld)},
			create: "jobs create", send: "jobs publish", run: "jobs process", old: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "")
			if tc.env == nil {
				if err := os.Unsetenv("OTEL_SEMCONV_STABILITY_OPT_IN"); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", *tc.env)
			}
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			tel, err := shareqotel.New(append([]shareqotel.Option{shareqotel.TracerProvider(tp), shareqotel.Propagator(propagation.TraceContext{})}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			create, send, run := spansOfAJob(t, tel, spans)
			for _, c := range []struct {
				s        sdktrace.ReadOnlySpan
				name, op string
				oldOp    string
			}{{create, tc.create, "create", "create"}, {send, tc.send, "send", "publish"}, {run, tc.run, "process", "process"}} {
				if c.s.Name() != c.name {
					t.Errorf("span name %q, want %q", c.s.Name(), c.name)
				}
				if got := oteltest.Attr(c.s, "messaging.operation").AsString() == c.oldOp; got != tc.old {
					t.Errorf("%s: messaging.operation=%s present %v, want %v", c.name, c.oldOp, got, tc.old)
				}
				if got := oteltest.Attr(c.s, "messaging.operation.type").AsString() == c.op; got != tc.cur {
					t.Errorf("%s: messaging.operation.type=%s present %v, want %v", c.name, c.op, got, tc.cur)
				}
			}
			if got := oteltest.Attr(run, "messaging.consumer.group.name").AsString() == "g"; got != tc.cur {
				t.Errorf("messaging.consumer.group.name present %v, want %v", got, tc.cur)
			}
			if got := oteltest.Attr(run, "messaging.kafka.consumer.group").AsString() == "g"; got != tc.old {
				t.Errorf("messaging.kafka.consumer.group present %v, want %v", got, tc.old)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestNewRejectsNil(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]shareqotel.Option{
		"tracer": shareqotel.TracerProvider(nil), "meter": shareqotel.MeterProvider(nil),
		"propagator": shareqotel.Propagator(nil), "semconv": shareqotel.SemanticConventions(9), "option": nil,
	} {
		if _, err := shareqotel.New(opt); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}
