package workerfx_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
	"github.com/shareq/shareq/workerfx"
)

func noop(context.Context, *handler.Job) error { return nil }

// serve returns h's status and report.
func serve(t *testing.T, h http.Handler) (int, workerfx.HealthReport) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var r workerfx.HealthReport
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("health body %q: %v", rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	return rec.Code, r
}

// wantStates checks the report's workers, by name, and its status.
func wantStates(t *testing.T, code int, r workerfx.HealthReport, wantCode int, want map[string]string) {
	t.Helper()
	if code != wantCode || r.OK != (wantCode == http.StatusOK) {
		t.Errorf("status %d, ok %v; want %d", code, r.OK, wantCode)
	}
	if len(r.Workers) != len(want) {
		t.Fatalf("workers %+v, want %v", r.Workers, want)
	}
	for _, w := range r.Workers {
		if want[w.Name] != w.State || w.Error != "" {
			t.Errorf("worker %q: state %q, error %q; want %q, no error", w.Name, w.State, w.Error, want[w.Name])
		}
	}
}

// The health handler reports every worker of the app: starting before
// app.Start (503), running after it (200), stopped after app.Stop (503,
// no error after a graceful stop).
func TestHealthReportsEveryWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mailTopic := b.c.Topic(t, 1)
	var h *workerfx.Health
	app := fxtest.New(t,
		fx.Supply(quietLogger()),
		workerfx.Module,
		fx.Supply(b.config()),
		workerfx.Handle(b.topic, handler.Func(noop)),
		workerfx.Named("mailer", worker.Group(b.c.Group(t)), worker.Brokers(b.c.Seeds...)),
		workerfx.HandleFor("mailer", mailTopic, handler.Func(noop)),
		workerfx.HealthModule,
		fx.Populate(&h),
	)
	code, r := serve(t, h)
	wantStates(t, code, r, http.StatusServiceUnavailable, map[string]string{"": workerfx.StateStarting, "mailer": workerfx.StateStarting})
	if r.Workers[0].Name != "" || r.Workers[0].Group != b.group {
		t.Errorf("first worker %+v, want Module's (name \"\", group %q)", r.Workers[0], b.group)
	}

	app.RequireStart()
	// Run starts in the module's goroutine, just after OnStart returns.
	deadline := time.Now().Add(30 * time.Second)
	for !h.Report().OK {
		if time.Now().After(deadline) {
			t.Fatalf("workers not reported running 30s after start: %+v", h.Report())
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, r = serve(t, h)
	wantStates(t, code, r, http.StatusOK, map[string]string{"": workerfx.StateRunning, "mailer": workerfx.StateRunning})

	app.RequireStop()
	code, r = serve(t, h)
	wantStates(t, code, r, http.StatusServiceUnavailable, map[string]string{"": workerfx.StateStopped, "mailer": workerfx.StateStopped})
}
