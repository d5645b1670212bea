package e2e_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/shareqotel/internal/oteltest"
	"github.com/shareq/shareq/worker"
)

// receiver is an OTLP/HTTP trace endpoint: it decodes each export
// request's protobuf body and keeps its spans.
type receiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	errs  []error
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		rc.errs = append(rc.errs, err)
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *receiver) byName(name string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			if v := kv.GetValue(); v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return kv.GetValue().String()
		}
	}
	return ""
}

// Spans exported over OTLP/HTTP arrive with their kinds, attributes and
// the run's parent and link, the enqueue.
func TestExportOverOTLP(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	if err != nil {
		t.Fatal(err)
	}
	ended := tracetest.NewSpanRecorder() // to wait for the run's end
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSpanProcessor(ended))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tel, err := shareqotel.New(shareqotel.TracerProvider(tp), shareqotel.Propagator(propagation.TraceContext{}),
		shareqotel.SemanticConventions(shareqotel.SemconvNew))
	if err != nil {
		t.Fatal(err)
	}

	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	q, err := enqueue.New(tel.Producer(c.Client(t, enqueue.ProducerOpts()...)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Enqueue(t.Context(), topic, "hello")
	if err != nil {
		t.Fatal(err)
	}
	oteltest.StartWorker(t, c, worker.Group(group), worker.Handle(topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
		worker.Use(tel.Middleware()), worker.Observers(tel))
	b := &oteltest.Bundle{Spans: ended}
	b.WaitSpans(t, "the run", func(s []sdktrace.ReadOnlySpan) bool { return oteltest.Count(s, "process "+topic) == 1 })
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}

	rc.mu.Lock()
	if len(rc.errs) > 0 {
		t.Errorf("bad export requests: %v", rc.errs)
	}
	rc.mu.Unlock()
	sends, runs := rc.byName("send "+topic), rc.byName("process "+topic)
	if len(sends) != 1 || len(runs) != 1 {
		t.Fatalf("received %d send and %d process spans, want one each", len(sends), len(runs))
	}
	send, run := sends[0], runs[0]
	if send.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER || run.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("kinds %v, %v; want PRODUCER, CONSUMER", send.GetKind(), run.GetKind())
	}
	if l := run.GetLinks(); len(l) != 1 || string(l[0].GetSpanId()) != string(send.GetSpanId()) || string(l[0].GetTraceId()) != string(send.GetTraceId()) {
		t.Errorf("run links %v; want the send span", l)
	}
	if string(run.GetParentSpanId()) != string(send.GetSpanId()) || string(run.GetTraceId()) != string(send.GetTraceId()) {
		t.Errorf("run's parent %x in trace %x; want the send span", run.GetParentSpanId(), run.GetTraceId())
	}
	for k, v := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": topic, "messaging.consumer.group.name": group,
		"messaging.message.id": id, "shareq.job.outcome": "succeeded", "messaging.operation.type": "process"} {
		if got := attrOf(run, k); got != v {
			t.Errorf("run %s = %q, want %q", k, got, v)
		}
	}
	if attrOf(run, "messaging.kafka.consumer.group") != "" {
		t.Errorf("v1.24 attributes with SemconvNew")
	}
	if run.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_UNSET {
		t.Errorf("run status %v", run.GetStatus())
	}
}
