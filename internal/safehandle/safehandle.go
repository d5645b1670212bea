// Package safehandle runs a handler with its panics turned into permanent
// failures: the one conversion that middleware.Recover, the dlq
// middleware and the worker's executor share.
package safehandle

import (
	"context"
	"runtime/debug"

	"github.com/shareq/shareq/handler"
)

// Handle runs h on job and returns its error. A panic in h is recovered
// and returned as a [handler.PermanentError] with reason
// [handler.ReasonPanic] around a [handler.PanicError] that carries the
// panic value and the stack of the goroutine where it happened.
func Handle(ctx context.Context, h handler.Handler, job *handler.Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PermanentError{Reason: handler.ReasonPanic, Err: &handler.PanicError{Value: v, Stack: debug.Stack()}}
		}
	}()
	return h.Handle(ctx, job)
}
