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

// A park note records what a dlq middleware noted, per context: nothing
// outside a worker's note, nothing before the note is written, the last
// park once it is, and it is safe to note from another goroutine.
func TestParkNote(t *testing.T) {
	t.Parallel()
	bare := context.Background()
	if handler.NoteParked(bare, handler.DeadLetter{Topic: "x.dlq"}) {
		t.Error("NoteParked reported a note in a context without one")
	}
	if _, ok := handler.ParkedFrom(bare); ok {
		t.Error("ParkedFrom found a park in a context without a note")
	}
	ctx := handler.WithParkNote(bare)
	if _, ok := handler.ParkedFrom(ctx); ok {
		t.Error("a fresh note says parked")
	}
	child, cancel := context.WithCancel(ctx) // middleware pass derived contexts on
	defer cancel()
	cause := errors.New("bad address")
	done := make(chan bool)
	go func() {
		done <- handler.NoteParked(child, handler.DeadLetter{Topic: "emails.dlq", Partition: 2, Offset: 9, Reason: handler.ReasonPermanent, Err: cause})
	}()
	if !<-done {
		t.Fatal("NoteParked found no note in a context derived from WithParkNote")
	}
	p, ok := handler.ParkedFrom(ctx)
	if !ok || p.Topic != "emails.dlq" || p.Partition != 2 || p.Offset != 9 || p.Reason != handler.ReasonPermanent || !errors.Is(p.Err, cause) {
		t.Fatalf("ParkedFrom = %+v, %v", p, ok)
	}
	if _, ok := handler.ParkedFrom(handler.WithParkNote(ctx)); ok {
		t.Error("a new note inherits the old one's park")
	}
}

// ExpectPark says, to middleware inside a dead-letter middleware, which
// failures it parks: permanent ones always, any one on a delivery it
// parks on; EndExpectPark withdraws it for middleware outside.
func TestExpectPark(t *testing.T) {
	t.Parallel()
	perm, plain := handler.Permanent(errors.New("404")), errors.New("503")
	if handler.ExpectPark(context.Background(), true) || handler.WillPark(context.Background(), perm) {
		t.Fatal("a context without a note expects a park")
	}
	ctx := handler.WithParkNote(context.Background())
	if handler.WillPark(ctx, perm) {
		t.Fatal("WillPark before ExpectPark")
	}
	if !handler.ExpectPark(ctx, false) {
		t.Fatal("ExpectPark found no note")
	}
	if !handler.WillPark(ctx, perm) || handler.WillPark(ctx, plain) || handler.WillPark(ctx, nil) {
		t.Fatal("not the last delivery: want only the permanent failure parked")
	}
	handler.ExpectPark(ctx, true)
	if !handler.WillPark(ctx, plain) {
		t.Fatal("the last delivery: want any failure parked")
	}
	handler.EndExpectPark(ctx)
	if handler.WillPark(ctx, perm) {
		t.Fatal("WillPark after EndExpectPark")
	}
}

// A cancel note: nothing outside a worker's note, not cancelled until
// noted, cancelled once noted through a derived context, and a new note
// starts clean.
func TestCancelNote(t *testing.T) {
	t.Parallel()
	bare := context.Background()
	if handler.NoteCancelled(bare) || handler.CancelledFrom(bare) {
		t.Fatal("a context without a note takes or reports a cancel")
	}
	ctx := handler.WithParkNote(bare)
	if handler.CancelledFrom(ctx) {
		t.Fatal("a fresh note says cancelled")
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan bool)
	go func() { done <- handler.NoteCancelled(child) }()
	if !<-done {
		t.Fatal("NoteCancelled found no note in a context derived from WithParkNote")
	}
	if !handler.CancelledFrom(ctx) {
		t.Fatal("CancelledFrom after NoteCancelled = false")
	}
	if _, parked := handler.ParkedFrom(ctx); parked {
		t.Fatal("a cancelled job reads as parked")
	}
	if handler.CancelledFrom(handler.WithParkNote(ctx)) {
		t.Fatal("a new note inherits the old one's cancel")
	}
}
