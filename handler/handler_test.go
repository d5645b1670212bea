package handler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

func TestChainOrder(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) handler.Middleware {
		return func(next handler.Handler) handler.Handler {
			return handler.Func(func(ctx context.Context, job *handler.Job) error {
				order = append(order, name+">")
				err := next.Handle(ctx, job)
				order = append(order, "<"+name)
				return err
			})
		}
	}
	h := handler.Chain(handler.Func(func(context.Context, *handler.Job) error {
		order = append(order, "handler")
		return nil
	}), mw("a"), mw("b"))
	if err := h.Handle(context.Background(), &handler.Job{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, " "); got != "a> b> handler <b <a" {
		t.Fatalf("order %q, want the first middleware outermost", got)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	type email struct {
		To string `json:"to"`
	}
	var got email
	h := handler.JSON(func(_ context.Context, _ *handler.Job, e email) error {
		got = e
		return nil
	})
	if err := h.Handle(context.Background(), &handler.Job{Value: []byte(`{"to":"a@b.c","extra":1}`)}); err != nil {
		t.Fatal(err)
	}
	if got.To != "a@b.c" {
		t.Fatalf("decoded %+v", got)
	}
	for _, bad := range []string{``, `{`, `"string"`, `{"to":5}`} {
		err := h.Handle(context.Background(), &handler.Job{Value: []byte(bad)})
		var pe *handler.PermanentError
		if !errors.As(err, &pe) || pe.Reason != handler.ReasonDecode {
			t.Errorf("payload %q: error %v, want a permanent decode error", bad, err)
		}
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"n":1}`, ``, `null`, `{"n":"x"}`, `[1,2]`, "\xff\xfe", `{"n":1e999}`} {
		f.Add([]byte(s))
	}
	h := handler.JSON(func(_ context.Context, _ *handler.Job, v struct{ N int }) error { return nil })
	f.Fuzz(func(t *testing.T, value []byte) {
		err := h.Handle(context.Background(), &handler.Job{Value: value})
		if err != nil && (!handler.IsPermanent(err) || handler.ReasonOf(err) != handler.ReasonDecode) {
			t.Fatalf("payload %q: %v is not a permanent decode error", value, err)
		}
	})
}

func TestJobID(t *testing.T) {
	t.Parallel()
	base := handler.Job{Topic: "emails", Partition: 3, Offset: 42}
	for _, tc := range []struct {
		name    string
		headers []handler.Header
		want    string
	}{
		{"no header", nil, "emails/3/42"},
		{"header", []handler.Header{{Key: handler.JobIDHeader, Value: []byte("job-7")}}, "job-7"},
		{"empty header", []handler.Header{{Key: handler.JobIDHeader}}, "emails/3/42"},
		{"last header wins", []handler.Header{{Key: handler.JobIDHeader, Value: []byte("a")}, {Key: handler.JobIDHeader, Value: []byte("b")}}, "b"},
	} {
		j := base
		j.Headers = tc.headers
		if got := j.ID(); got != tc.want {
			t.Errorf("%s: ID() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLastDelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		count, limit int32
		want         bool
	}{{1, 5, false}, {5, 5, true}, {6, 5, true}, {9, 0, false}} {
		j := handler.Job{DeliveryCount: tc.count, DeliveryLimit: tc.limit}
		if got := j.LastDelivery(); got != tc.want {
			t.Errorf("count %d limit %d: LastDelivery() = %v", tc.count, tc.limit, got)
		}
	}
}

func TestOutcomeErrors(t *testing.T) {
	t.Parallel()
	base := errors.New("smtp 550")
	if handler.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
	p := fmt.Errorf("send: %w", handler.Permanent(base))
	if !handler.IsPermanent(p) || !errors.Is(p, base) || handler.ReasonOf(p) != handler.ReasonPermanent {
		t.Errorf("wrapped permanent error lost its kind, cause or reason: %v", p)
	}
	r := handler.Retry("rate-limited", base)
	if handler.IsPermanent(r) || !errors.Is(r, base) || handler.ReasonOf(r) != "rate-limited" {
		t.Errorf("retry error: %v", r)
	}
	if handler.ReasonOf(base) != "" || handler.ReasonOf(nil) != "" {
		t.Error("plain errors have no reason")
	}
	if err := handler.PermanentReason("invalid-address", base); !handler.IsPermanent(err) || handler.ReasonOf(err) != "invalid-address" {
		t.Errorf("PermanentReason: %v", err)
	}
	if handler.PermanentReason("x", nil) != nil {
		t.Error("PermanentReason(r, nil) is not nil")
	}
	if handler.Unavailable("postgres", nil) != nil {
		t.Error("Unavailable(d, nil) is not nil")
	}
	u := fmt.Errorf("claim: %w", handler.Unavailable("postgres", base))
	var ue *handler.UnavailableError
	if !handler.IsUnavailable(u) || !errors.As(u, &ue) || ue.Dependency != "postgres" || !errors.Is(u, base) ||
		handler.IsPermanent(u) || handler.ReasonOf(u) != handler.ReasonUnavailable || u.Error() != "claim: postgres unavailable: smtp 550" {
		t.Errorf("unavailable error lost its kind, dependency, cause or reason: %v", u)
	}
	if handler.IsUnavailable(base) || handler.IsUnavailable(r) {
		t.Error("plain and retry errors are not unavailable")
	}
	pe := &handler.PanicError{Value: base}
	if !errors.Is(pe, base) || pe.Error() != "panic: smtp 550" {
		t.Errorf("panic error: %v", pe)
	}
}

func TestRetryAfterCarriesItsDelay(t *testing.T) {
	t.Parallel()
	cause := errors.New("429 Too Many Requests")
	err := fmt.Errorf("webhook: %w", handler.RetryAfter(30*time.Second, cause))
	var re *handler.RetryError
	if !errors.As(err, &re) || re.After != 30*time.Second || re.Reason != handler.ReasonRetryAfter || !errors.Is(err, cause) {
		t.Fatalf("RetryAfter wrapped: %#v", re)
	}
	if handler.IsPermanent(err) {
		t.Error("RetryAfter is permanent")
	}
	if got := handler.Retry("rate-limited", cause).(*handler.RetryError).After; got != 0 {
		t.Errorf("Retry's delay = %v, want 0 (the worker's backoff)", got)
	}
}

func TestLoggerFromContext(t *testing.T) {
	t.Parallel()
	if handler.Logger(context.Background()) != slog.Default() {
		t.Error("a context without a logger: want slog.Default()")
	}
	l := slog.New(slog.DiscardHandler)
	if got := handler.Logger(handler.WithLogger(context.Background(), l)); got != l {
		t.Error("the context's logger was not returned")
	}
	if handler.Logger(handler.WithLogger(context.Background(), nil)) != slog.Default() {
		t.Error("a nil logger in the context: want slog.Default()")
	}
}

// Parked and Cancelled are the middleware's outcomes: found with errors.As
// through any wrapping, ParkedError unwrapping to the failure it was
// parked for, and neither taken for the other.
func TestParkedAndCancelledErrors(t *testing.T) {
	t.Parallel()
	cause := errors.New("bad address")
	dl := handler.DeadLetter{Topic: "emails.dlq", Partition: 2, Offset: 9, Reason: handler.ReasonPermanent, Err: handler.Permanent(cause)}
	err := fmt.Errorf("logging: %w", handler.Parked(dl))
	p, ok := handler.ParkedOf(err)
	if !ok || p.Topic != "emails.dlq" || p.Partition != 2 || p.Offset != 9 || p.Reason != handler.ReasonPermanent {
		t.Fatalf("ParkedOf = %+v, %v", p, ok)
	}
	if !errors.Is(err, cause) || !handler.IsPermanent(err) {
		t.Errorf("a parked error does not unwrap to what it was parked for: %v", err)
	}
	if got := err.Error(); !strings.Contains(got, "emails.dlq") || !strings.Contains(got, "bad address") || !strings.Contains(got, handler.ReasonPermanent) {
		t.Errorf("message %q does not say where and why", got)
	}
	if handler.IsCancelled(err) {
		t.Error("a parked job reads as cancelled")
	}
	for _, e := range []error{nil, cause, handler.Permanent(cause)} {
		if _, ok := handler.ParkedOf(e); ok || handler.IsCancelled(e) {
			t.Errorf("%v reads as parked or cancelled", e)
		}
	}

	reason := errors.New("cancelled by the operator")
	c := fmt.Errorf("otel: %w", handler.Cancelled(reason))
	if !handler.IsCancelled(c) || !errors.Is(c, reason) {
		t.Fatalf("IsCancelled(%v) = false or the reason is lost", c)
	}
	if _, parked := handler.ParkedOf(c); parked {
		t.Error("a cancelled job reads as parked")
	}
	if got := handler.Cancelled(nil).Error(); got != "job cancelled before it ran" {
		t.Errorf("Cancelled(nil) = %q", got)
	}
}
