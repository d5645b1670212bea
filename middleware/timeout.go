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
// abandon a handler that ignores it. A handler that returns after its
// deadline has its error wrapped as a [handler.RetryError] with reason
// "timeout", so the job is released for another delivery.
//
// Timeout fails when d is not positive.
func Timeout(d time.Duration) (handler.Middleware, error) {
	if d <= 0 {
		return nil, fmt.Errorf("middleware: Timeout(%v): must be positive", d)
	}
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, ErrTimeout)
			defer cancel()
			err := next.Handle(ctx, job)
			if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) && !handler.IsPermanent(err) {
				return handler.Retry("timeout", fmt.Errorf("after %v: %w", d, err))
			}
			return err
		})
	}, nil
}
