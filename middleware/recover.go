package middleware

import (
	"context"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/safehandle"
)

// Recover returns middleware that turns a panic in the handlers it wraps
// into a [handler.PermanentError] with reason [handler.ReasonPanic] around
// a [handler.PanicError] carrying the panic value and stack. The job is
// then rejected, or parked by the dlq middleware when that runs outside
// Recover, and the process keeps running.
//
// The worker already recovers panics closest to each handler, so Recover
// is needed only to catch panics of middleware placed inside it.
func Recover() handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			return safehandle.Handle(ctx, next, job)
		})
	}
}
