package shareqotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shareq/shareq/enqueue"
	shareqotel "github.com/shareq/shareq/otel"
	"github.com/shareq/shareq/otel/internal/oteltest"
)

// OTEL_SEMCONV_STABILITY_OPT_IN picks the attribute names as the
// conventions say; messaging/dup wins over messaging.
func TestSemconvStabilityOptIn(t *testing.T) {
	for _, tc := range []struct {
		env, name string
		old, cur  bool
	}{
		{"", "jobs create", true, false},
		{"http", "jobs create", true, false},
		{"messaging", "create jobs", false, true},
		{"http, messaging/dup", "create jobs", true, true},
		{"messaging,messaging/dup", "create jobs", true, true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", tc.env)
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			tel, err := shareqotel.New(shareqotel.TracerProvider(tp), shareqotel.Propagator(propagation.TraceContext{}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := enqueue.NewJob("jobs", 1, tel.Inject(context.Background(), "jobs")).Record(); err != nil {
				t.Fatal(err)
			}
			s := spans.Ended()[0]
			if s.Name() != tc.name {
				t.Errorf("span name %q, want %q", s.Name(), tc.name)
			}
			if got := oteltest.Attr(s, "messaging.operation").AsString() == "create"; got != tc.old {
				t.Errorf("old messaging.operation present %v, want %v", got, tc.old)
			}
			if got := oteltest.Attr(s, "messaging.operation.type").AsString() == "create"; got != tc.cur {
				t.Errorf("messaging.operation.type present %v, want %v", got, tc.cur)
			}
		})
	}
}

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
