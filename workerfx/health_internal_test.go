package workerfx

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// A worker whose Run failed is reported stopped, with Run's error, and
// fails the report. (In an app such a worker also shuts the app down;
// here its Run is called directly, on a topic that does not exist, the
// one way to make a worker stop with an error that a broker guarantees.)
func TestHealthReportsWhyAWorkerStopped(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(c.Group(t)),
		worker.Handle("no-such-topic-"+kafkatest.Name(t, "t"), handler.Func(func(context.Context, *handler.Job) error { return nil })))
	if err != nil {
		t.Fatal(err)
	}
	s := &runState{name: "thumbnails", w: w}
	s.started.Store(true)
	running := &runState{name: "mailer", w: runningWorker(t, c)}
	running.started.Store(true)
	h := newHealth(healthParams{Workers: []*runState{s, running}})

	runErr := w.Run(t.Context())
	if !errors.Is(runErr, worker.ErrTopicMissing) {
		t.Fatalf("Run on a missing topic = %v, want worker.ErrTopicMissing", runErr)
	}
	r := h.Report()
	if r.OK || len(r.Workers) != 2 {
		t.Fatalf("report %+v, want two workers, not OK", r)
	}
	if got := r.Workers[1]; got.Name != "thumbnails" || got.State != StateStopped || got.Error != runErr.Error() {
		t.Errorf("stopped worker reported %+v, want stopped with %q", got, runErr)
	}
	if got := r.Workers[0]; got.Name != "mailer" || got.State != StateRunning || got.Error != "" {
		t.Errorf("running worker reported %+v, want running", got)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"state":"stopped"`) {
		t.Errorf("served %d %s, want 503 with the stopped worker", rec.Code, rec.Body)
	}
}

// runningWorker returns a worker that is not stopped (Run is never
// called: its Stopped channel stays open).
func runningWorker(t *testing.T, c *kafkatest.Cluster) *worker.Worker {
	t.Helper()
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(c.Group(t)),
		worker.Handle(c.Topic(t, 1), handler.Func(func(context.Context, *handler.Job) error { return nil })))
	if err != nil {
		t.Fatal(err)
	}
	return w
}
