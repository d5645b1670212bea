package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/jobctx"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/middleware"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// linesAt returns the lines of a text log at level or above.
func linesAt(log string, levels ...string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		for _, lv := range levels {
			if strings.Contains(l, "level="+lv) {
				out = append(out, l)
			}
		}
	}
	return out
}

// fakeDLQ answers every produce with partition 3, offset 42.
type fakeDLQ struct{}

func (fakeDLQ) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		r.Partition, r.Offset = 3, 42
		out[i] = kgo.ProduceResult{Record: r}
	}
	return out
}

// Inside a dlq middleware, Logging leaves a failure the dlq middleware
// parks to the worker's line (Debug here), and logs the others as before;
// the dlq middleware's own line is at Debug in a job's context, and the
// location of the DLQ record reaches the park note the worker reads.
func TestLoggingInsideDLQ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		err       error
		delivery  int32
		wantLevel string
		wantMsg   string
		parked    bool
	}{
		{"permanent", handler.Permanent(errors.New("HTTP 404")), 1, "DEBUG", "the dlq middleware parks it", true},
		{"last delivery", errors.New("HTTP 503"), 5, "DEBUG", "the dlq middleware parks it", true},
		{"retry", errors.New("HTTP 503"), 2, "WARN", "job failed, will retry", false},
	} {
		var logs logbuf.Buffer
		l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		park, err := dlq.Middleware(fakeDLQ{}, dlq.Logger(l))
		if err != nil {
			t.Fatal(err)
		}
		h := handler.Func(func(context.Context, *handler.Job) error { return tc.err })
		j := &handler.Job{Topic: "hooks", Offset: 7, DeliveryCount: tc.delivery, DeliveryLimit: 5}
		// As in a worker, which logs the parked job itself.
		gotErr := handler.Chain(h, park, middleware.Logging(l)).Handle(jobctx.WithWorker(context.Background()), j)
		p, parked := handler.ParkedOf(gotErr)
		if parked != tc.parked || gotErr == nil {
			t.Fatalf("%s: parked %v, err %v; want parked %v", tc.name, parked, gotErr, tc.parked)
		}
		if parked && (p.Topic != "hooks.dlq" || p.Partition != 3 || p.Offset != 42 || p.Reason == "") {
			t.Errorf("%s: park note %+v, want hooks.dlq/3/42 and a reason", tc.name, p)
		}
		out := logs.String()
		if loud := linesAt(out, "WARN", "ERROR"); tc.parked && len(loud) != 0 {
			t.Errorf("%s: a parked job logged at Warn or Error by the middleware (the worker logs it):\n%s", tc.name, strings.Join(loud, "\n"))
		}
		if !strings.Contains(out, "level="+tc.wantLevel) || !strings.Contains(out, tc.wantMsg) {
			t.Errorf("%s: log lacks %s %q:\n%s", tc.name, tc.wantLevel, tc.wantMsg, out)
		}
	}
}

// Around a dlq middleware whose park fails, Logging logs the failure as
// such, not as a park.
func TestLoggingAroundFailedPark(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	l := slog.New(slog.NewTextHandler(&logs, nil))
	park, err := dlq.Middleware(failingDLQ{}, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(context.Context, *handler.Job) error { return handler.Permanent(errors.New("HTTP 404")) })
	j := &handler.Job{Topic: "hooks", Offset: 7, DeliveryCount: 5, DeliveryLimit: 5}
	if err := handler.Chain(h, middleware.Logging(l), park).Handle(context.Background(), j); err == nil {
		t.Fatal("the failed park returned nil")
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "dlq-produce") || strings.Contains(out, "parks it") {
		t.Fatalf("log %q, want an Error for the failed park", out)
	}
}

// failingDLQ refuses every produce.
type failingDLQ struct{}

func (failingDLQ) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i] = kgo.ProduceResult{Record: r, Err: errors.New("broker down")}
	}
	return out
}

// Without a dlq middleware around it, a permanent failure is an Error.
func TestLoggingPermanentWithoutDLQ(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	l := slog.New(slog.NewTextHandler(&logs, nil))
	h := handler.Func(func(context.Context, *handler.Job) error { return handler.Permanent(errors.New("HTTP 404")) })
	_ = middleware.Logging(l)(h).Handle(context.Background(), job)
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "job failed permanently") {
		t.Fatalf("log %q, want an Error", out)
	}
}

// An outage is the worker's to log (once down, once back): the failures
// it causes are Debug here, also inside a dlq middleware on the last
// delivery, which does not park them.
func TestLoggingUnavailableAtDebug(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := handler.Func(func(context.Context, *handler.Job) error {
		return handler.Unavailable("postgres", errors.New("connection refused"))
	})
	last := *job
	last.DeliveryCount, last.DeliveryLimit = 5, 5
	park, err := dlq.Middleware(fakeDLQ{})
	if err != nil {
		t.Fatal(err)
	}
	err = handler.Chain(h, park, middleware.Logging(l)).Handle(context.Background(), &last)
	if !handler.IsUnavailable(err) {
		t.Fatalf("Handle = %v, want the Unavailable error", err)
	}
	out := logs.String()
	if lines := linesAt(out, "INFO", "WARN", "ERROR"); len(lines) != 0 {
		t.Errorf("lines above Debug: %q", lines)
	}
	if !strings.Contains(out, "job waits: a dependency is down") {
		t.Errorf("log %q, want the Debug line", out)
	}
}

// A handler that fails because the worker cancelled its context for a
// shutdown is logged as interrupted, at Info, with the cause; a timeout
// is still a failure.
func TestLoggingInterrupted(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	l := slog.New(slog.NewTextHandler(&logs, nil))
	h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(worker.ErrShutdown)
	_ = middleware.Logging(l)(h).Handle(ctx, job)
	out := logs.String()
	if !strings.Contains(out, "level=INFO") || !strings.Contains(out, "job interrupted") || !strings.Contains(out, `cause="`+worker.ErrShutdown.Error()) || strings.Contains(out, "will retry") {
		t.Fatalf("log %q, want an Info line saying the job was interrupted by the shutdown", out)
	}

	logs = logbuf.Buffer{}
	tctx, tcancel := context.WithTimeoutCause(context.Background(), time.Millisecond, worker.ErrJobTimeout)
	defer tcancel()
	_ = middleware.Logging(l)(h).Handle(tctx, job)
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "job failed, will retry") {
		t.Fatalf("log %q, want a timed-out job to be a failure", out)
	}
}

// In a worker, a parked job gives one line at Warn or above: the
// worker's, with its reason and DLQ topic.
func TestParkedJobLogsOneLine(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	c.CreateTopic(t, topic+dlq.TopicSuffix, 1)
	c.Produce(t, &kgo.Record{Topic: topic, Key: []byte("a"), Value: []byte("404")}, &kgo.Record{Topic: topic, Key: []byte("b"), Value: []byte("ok")})
	cl := c.Client(t)
	park, err := dlq.Middleware(cl)
	if err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	obs := new(shareqtest.Observer)
	h := handler.Func(func(_ context.Context, j *handler.Job) error {
		if string(j.Value) == "404" {
			return handler.Permanent(errors.New("HTTP 404 Not Found"))
		}
		return nil
	})
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(c.Group(t)), worker.Handle(topic, h),
		worker.Use(park, middleware.Logging(nil)), worker.Observers(obs),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, nil))), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	obs.WaitFor(t, 60*time.Second, "both jobs done", func(es []shareqtest.Event) bool { return len(es) >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	loud := linesAt(logs.String(), "WARN", "ERROR")
	var parkedLines []string
	for _, l := range loud {
		if strings.Contains(l, "job_id="+topic+"/0/0 ") {
			parkedLines = append(parkedLines, l)
		}
	}
	if len(parkedLines) != 1 || !strings.Contains(parkedLines[0], "job parked in its dead-letter topic") ||
		!strings.Contains(parkedLines[0], "reason=permanent") || !strings.Contains(parkedLines[0], "dlq_topic="+topic+dlq.TopicSuffix) {
		t.Fatalf("parked job's lines at Warn and above:\n%s\nwant one, the worker's, with reason and DLQ topic; all:\n%s", strings.Join(parkedLines, "\n"), logs.String())
	}
}
