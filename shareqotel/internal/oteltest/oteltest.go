// Package oteltest holds what the module's tests share: a Telemetry on
// an SDK with in-memory span and metric readers, and finders over what
// they recorded.
package oteltest

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/internal/kafkatest"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// WaitTimeout bounds every wait on a condition: generous, for a loaded
// CI box.
const WaitTimeout = 60 * time.Second

// Bundle is what a test works with: a Telemetry on an SDK whose spans
// and metrics the test reads.
type Bundle struct {
	Tel    *shareqotel.Telemetry
	TP     *sdktrace.TracerProvider
	Spans  *tracetest.SpanRecorder
	Reader *sdkmetric.ManualReader
}

// Setup returns a Bundle whose Telemetry emits both sets of the
// conventions' attributes (SemconvDup), then takes opts.
func Setup(t *testing.T, opts ...shareqotel.Option) *Bundle {
	t.Helper()
	return SetupDefaults(t, append([]shareqotel.Option{shareqotel.SemanticConventions(shareqotel.SemconvDup)}, opts...)...)
}

// SetupDefaults returns a Bundle whose Telemetry has the package's
// defaults but for its providers and propagator (W3C trace context), and
// opts.
func SetupDefaults(t *testing.T, opts ...shareqotel.Option) *Bundle {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	tel, err := shareqotel.New(append([]shareqotel.Option{shareqotel.TracerProvider(tp), shareqotel.MeterProvider(mp),
		shareqotel.Propagator(propagation.TraceContext{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &Bundle{Tel: tel, TP: tp, Spans: spans, Reader: reader}
}

// WaitSpans waits until the ended spans satisfy cond and returns them.
func (b *Bundle) WaitSpans(t *testing.T, what string, cond func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		ended := b.Spans.Ended()
		if cond(ended) {
			return ended
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; spans: %s", what, Describe(ended))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func Describe(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString("\n  " + s.Name() + " " + s.SpanKind().String() + " " + Attr(s, "shareq.job.outcome").Emit())
	}
	return b.String()
}

// Named returns the ended spans called name, in the order they ended.
func Named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Count reports how many spans are called name.
func Count(spans []sdktrace.ReadOnlySpan, name string) int { return len(Named(spans, name)) }

func Attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func HasEvent(s sdktrace.ReadOnlySpan, name string) (sdktrace.Event, bool) {
	for _, e := range s.Events() {
		if e.Name == name {
			return e, true
		}
	}
	return sdktrace.Event{}, false
}

func EventAttr(e sdktrace.Event, key string) attribute.Value {
	for _, kv := range e.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// LinkTo returns the link of s to the span sc, and whether it has one.
func LinkTo(s sdktrace.ReadOnlySpan, sc trace.SpanContext) (sdktrace.Link, bool) {
	i := slices.IndexFunc(s.Links(), func(l sdktrace.Link) bool {
		return l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID()
	})
	if i < 0 {
		return sdktrace.Link{}, false
	}
	return s.Links()[i], true
}

func LinkKind(l sdktrace.Link) string {
	for _, kv := range l.Attributes {
		if kv.Key == "shareq.link" {
			return kv.Value.AsString()
		}
	}
	return ""
}

// Metrics collects b's metrics by name.
func (b *Bundle) Metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// HistCount is the number of observations of a histogram whose points
// have attribute key=value.
func HistCount(agg metricdata.Aggregation, key, value string) uint64 {
	h, ok := agg.(metricdata.Histogram[float64])
	if !ok {
		return 0
	}
	var n uint64
	for _, p := range h.DataPoints {
		if v, ok := p.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			n += p.Count
		}
	}
	return n
}

// SumWith is the sum of an int64 counter's points that have attribute
// key=value.
func SumWith(agg metricdata.Aggregation, key, value string) int64 {
	s, ok := agg.(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var n int64
	for _, p := range s.DataPoints {
		if v, ok := p.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			n += p.Value
		}
	}
	return n
}

// QuietLogger logs nothing.
func QuietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// StartWorker runs a worker until the test ends.
func StartWorker(t *testing.T, c *kafkatest.Cluster, opts ...worker.Option) {
	t.Helper()
	w, err := worker.New(append([]worker.Option{worker.Brokers(c.Seeds...), worker.Logger(QuietLogger()),
		worker.ShutdownTimeout(5 * time.Second), worker.RetryBackoff(func(int32) time.Duration { return 10 * time.Millisecond })}, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	stop := kafkatest.Run(t, w.Run)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	})
}

// LogBuffer is a slog handler's output, safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
