package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/middleware"
)

var job = &handler.Job{Topic: "emails", Partition: 1, Offset: 9, DeliveryCount: 2, DeliveryLimit: 5}

func TestRecover(t *testing.T) {
	t.Parallel()
	h := middleware.Recover()(handler.Func(func(context.Context, *handler.Job) error { panic("boom") }))
	err := h.Handle(context.Background(), job)
	var pe *handler.PanicError
	if !handler.IsPermanent(err) || handler.ReasonOf(err) != handler.ReasonPanic || !errors.As(err, &pe) {
		t.Fatalf("error %v, want a permanent panic error", err)
	}
	if pe.Value != "boom" || !strings.Contains(string(pe.Stack), "middleware_test.go") {
		t.Fatalf("panic value %v, stack %s", pe.Value, pe.Stack)
	}
	ok := middleware.Recover()(handler.Func(func(context.Context, *handler.Job) error { return nil }))
	if err := ok.Handle(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		func() {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), fmt.Sprintf("Timeout(%v)", d)) {
					t.Errorf("Timeout(%v) panicked with %v, want a message naming it", d, v)
				}
			}()
			middleware.Timeout(d)
		}()
	}
	mw := middleware.Timeout(20 * time.Millisecond)
	slow := mw(handler.Func(func(ctx context.Context, _ *handler.Job) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	err := slow.Handle(context.Background(), job)
	if handler.IsPermanent(err) || handler.ReasonOf(err) != "timeout" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out handler: %v, want a retry error with reason timeout", err)
	}
	perm := mw(handler.Func(func(ctx context.Context, _ *handler.Job) error {
		<-ctx.Done()
		return handler.Permanent(errors.New("bad"))
	}))
	if err := perm.Handle(context.Background(), job); !handler.IsPermanent(err) {
		t.Fatalf("a permanent error after the timeout stays permanent: %v", err)
	}
	fast := mw(handler.Func(func(context.Context, *handler.Job) error { return errors.New("plain") }))
	if err := fast.Handle(context.Background(), job); handler.ReasonOf(err) != "" {
		t.Fatalf("an error before the deadline is passed through unchanged: %v", err)
	}
}

func TestLogging(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		err   error
		job   handler.Job
		level string
		msg   string
	}{
		{"ok", nil, *job, "DEBUG", "job done"},
		{"retry", errors.New("503"), *job, "WARN", "will retry"},
		{"permanent", handler.Permanent(errors.New("bad")), *job, "ERROR", "permanently"},
		{"last delivery", errors.New("503"), handler.Job{Topic: "emails", DeliveryCount: 5, DeliveryLimit: 5}, "ERROR", "last delivery"},
	} {
		var buf bytes.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := middleware.Logging(l)(handler.Func(func(context.Context, *handler.Job) error { return tc.err }))
		j := tc.job
		j.Value = []byte("secret payload")
		if err := h.Handle(context.Background(), &j); !errors.Is(err, tc.err) {
			t.Errorf("%s: error changed to %v", tc.name, err)
		}
		out := buf.String()
		if !strings.Contains(out, "level="+tc.level) || !strings.Contains(out, tc.msg) || !strings.Contains(out, "topic=emails") {
			t.Errorf("%s: log %q, want level %s and %q", tc.name, out, tc.level, tc.msg)
		}
		if strings.Contains(out, "secret payload") {
			t.Errorf("%s: payload logged: %q", tc.name, out)
		}
	}
}

// A job that a dlq middleware inside Logging parked (the handler chain
// returns a ParkedError) is logged as parked, not as failed, at Debug.
func TestLoggingParked(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	parks := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		return handler.Parked(handler.DeadLetter{Topic: "emails.dlq", Reason: handler.ReasonPermanent, Err: errors.New("bad address")})
	})
	if _, parked := handler.ParkedOf(middleware.Logging(l)(parks).Handle(context.Background(), job)); !parked {
		t.Fatal("Logging did not pass the ParkedError on")
	}
	out := buf.String()
	// At Debug: the worker logs the parked job, once, at Warn.
	for _, want := range []string{"level=DEBUG", "job parked", "dlq_topic=emails.dlq", "reason=permanent", `error="bad address"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "job done") || strings.Contains(out, "failed") {
		t.Errorf("a parked job logged as done or failed: %q", out)
	}
}

// A job that the idempotency middleware inside Logging found cancelled is
// logged as cancelled, not as done, at Debug: the worker logs it at Info.
func TestLoggingCancelled(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cancelled := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		return handler.Cancelled(errors.New("cancelled by the operator"))
	})
	if err := middleware.Logging(l)(cancelled).Handle(context.Background(), job); !handler.IsCancelled(err) {
		t.Fatalf("Handle = %v, want the CancelledError passed on", err)
	}
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, `msg="job cancelled; not run"`) || strings.Contains(out, "job done") {
		t.Errorf("cancelled job's line = %q", out)
	}
}

// Logging(nil) logs through the logger the job's context carries (the
// worker's), and Logging(l) through l whatever the context carries.
func TestLoggingUsesTheContextLogger(t *testing.T) {
	t.Parallel()
	var fromCtx, given bytes.Buffer
	ctxLog := slog.New(slog.NewTextHandler(&fromCtx, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := handler.WithLogger(context.Background(), ctxLog)
	ok := handler.Func(func(context.Context, *handler.Job) error { return nil })
	if err := middleware.Logging(nil)(ok).Handle(ctx, job); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fromCtx.String(), "job done") {
		t.Errorf("Logging(nil) did not log through the context's logger: %q", fromCtx.String())
	}
	fromCtx.Reset()
	l := slog.New(slog.NewTextHandler(&given, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := middleware.Logging(l)(ok).Handle(ctx, job); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(given.String(), "job done") || fromCtx.Len() != 0 {
		t.Errorf("Logging(l) logged %q to l and %q to the context's logger; want l only", given.String(), fromCtx.String())
	}
}
