package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shareq/shareq/handler"
)

// ErrTimeout is the cause of the context of a handler cancelled by
// [Timeout]; a handler that returns the context's error reports
// context.DeadlineExceeded, which the worker treats as retryable.
var ErrTimeout = errors.New("middleware: handler timed out")

// Timeout returns middleware that cancels the handler's context after d.
// The handler must return when its context is done; Timeout does not
// abandon a handler that ignores it. A handler that returns an error after
// its deadline has it wrapped as a [handler.RetryError] with reason
// [handler.ReasonTimeout], so the job is released for another delivery (a permanent
// error stays permanent).
//
// The worker has the same built in, per topic and as a default
// (worker.JobTimeout, worker.TopicJobTimeout); use Timeout to bound part
// of a chain, or a handler outside a worker.
//
// Like the other constructors of this package, Timeout returns the
// middleware alone. It panics when d is not positive: a duration fixed in
// code, so a bad one is a programmer's error (as for time.NewTicker).
func Timeout(d time.Duration) handler.Middleware {
	if d <= 0 {
		panic(fmt.Sprintf("middleware: Timeout(%v): the duration must be positive", d))
	}
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next.Handle(ctx, job)
			// A job parked or cancelled inside is done with: no retry.
			_, parked := handler.ParkedOf(err)
			if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) && !handler.IsPermanent(err) && !parked && !handler.IsCancelled(err) {
				return handler.Retry(handler.ReasonTimeout, fmt.Errorf("after %v: %w", d, err))
			}
			return err
		})
	}
}
