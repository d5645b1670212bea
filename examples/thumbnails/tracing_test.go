package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps the spans of
// the export requests it decodes, with their service names.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service map[string]bool
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				rc.service[kv.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// With -otlp, every job's send and runs arrive at the collector: a run
// per delivery, a child of its job's send and linked to it, the parked
// one with an error.
func TestRunTracing(t *testing.T) {
	t.Parallel()
	rc := &otlpReceiver{service: map[string]bool{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	cfg := testConfig(t, 10)
	cfg.OTLP = srv.URL // the path defaults to /v1/traces
	s := runJSON(t, cfg)
	checkSummary(t, s, 10)

	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.service[serviceName] {
		t.Errorf("services %v, want %q", rc.service, serviceName)
	}
	sends := map[string]bool{}
	var runs []*tracepb.Span
	for _, sp := range rc.spans {
		switch sp.GetName() {
		case "send " + topic:
			sends[string(sp.GetSpanId())] = true
		case "process " + topic:
			runs = append(runs, sp)
		}
	}
	if len(sends) != 10 {
		t.Errorf("%d send spans, want one per job (10)", len(sends))
	}
	// Every delivery that ran: the jobs' first ones, the flaky job's
	// retries, and the corrupt one's, parked.
	if len(runs) < 10 {
		t.Fatalf("%d process spans, want at least one per job", len(runs))
	}
	failed := 0
	for _, sp := range runs {
		if l := sp.GetLinks(); len(l) != 1 || !sends[string(l[0].GetSpanId())] || string(l[0].GetSpanId()) != string(sp.GetParentSpanId()) {
			t.Errorf("run %x: parent %x, links %v; want its job's send span as both", sp.GetSpanId(), sp.GetParentSpanId(), l)
		}
		if sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			failed++
		}
	}
	if failed < 2 {
		t.Errorf("%d failed runs; want the flaky job's first and the corrupt one", failed)
	}
}
