package safehandle_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/safehandle"
)

func TestHandleReturnsTheHandlersError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, want := range []error{nil, boom, handler.Permanent(boom)} {
		h := handler.Func(func(context.Context, *handler.Job) error { return want })
		if got := safehandle.Handle(context.Background(), h, &handler.Job{}); got != want {
			t.Errorf("Handle = %v, want %v unchanged", got, want)
		}
	}
}

func TestHandleTurnsAPanicIntoAPermanentFailure(t *testing.T) {
	t.Parallel()
	value := errors.New("the value panicked with")
	err := safehandle.Handle(context.Background(), panicking{value}, &handler.Job{Topic: "t"})

	var perm *handler.PermanentError
	if !errors.As(err, &perm) || perm.Reason != handler.ReasonPanic {
		t.Fatalf("Handle = %#v, want a PermanentError with reason %q", err, handler.ReasonPanic)
	}
	var pe *handler.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Handle = %v, want a PanicError inside", err)
	}
	if pe.Value != value {
		t.Errorf("PanicError.Value = %v, want %v", pe.Value, value)
	}
	if !errors.Is(err, value) {
		t.Errorf("errors.Is(err, the panic value) = false; want the value reachable through Unwrap")
	}
	if s := string(pe.Stack); !strings.Contains(s, "safehandle_test.panicking.Handle") {
		t.Errorf("PanicError.Stack does not name the panicking function:\n%s", s)
	}
	if got, want := err.Error(), "panic: the value panicked with"; !strings.Contains(got, want) {
		t.Errorf("err.Error() = %q, want it to contain %q", got, want)
	}
}

func TestHandleRecoversPanicNil(t *testing.T) {
	t.Parallel()
	err := safehandle.Handle(context.Background(), handler.Func(func(context.Context, *handler.Job) error { panic(nil) }), &handler.Job{})
	if !handler.IsPermanent(err) {
		t.Fatalf("Handle = %v, want a permanent failure for panic(nil)", err)
	}
}

// panicking is a handler that panics with its value.
type panicking struct{ v any }

func (p panicking) Handle(context.Context, *handler.Job) error { panic(p.v) }
