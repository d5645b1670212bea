package handler

import (
	"context"
	"encoding/json"
	"fmt"
)

// Handler processes jobs. Handle is called once per delivery of a record,
// possibly on many goroutines at once, so implementations must be safe for
// concurrent use. Its return value is the job's outcome (see the package
// documentation): nil accepts the record, [Permanent] rejects it, and any
// other error releases it for another delivery.
//
// ctx is cancelled when the worker shuts down past its shutdown timeout or
// when the job has held its lock for the maximum hold time; a handler that
// returns promptly on cancellation lets its record go to another worker at
// once.
type Handler interface {
	Handle(ctx context.Context, job *Job) error
}

// Func adapts a function to a [Handler].
type Func func(ctx context.Context, job *Job) error

// Handle calls f(ctx, job).
func (f Func) Handle(ctx context.Context, job *Job) error { return f(ctx, job) }

// JSON returns a Handler that decodes each job's value as JSON into a T and
// calls f with it. A value that does not decode is a permanent failure with
// reason [ReasonDecode]: retrying would fail the same way, so the job is
// rejected (or parked in the DLQ) without calling f. Unknown fields are
// allowed.
func JSON[T any](f func(ctx context.Context, job *Job, v T) error) Handler {
	return Func(func(ctx context.Context, job *Job) error {
		var v T
		if err := json.Unmarshal(job.Value, &v); err != nil {
			return &PermanentError{Reason: ReasonDecode, Err: fmt.Errorf("decode %T: %w", v, err)}
		}
		return f(ctx, job, v)
	})
}

// Middleware wraps a Handler with behaviour of its own: logging, timeouts,
// idempotency, dead-letter parking. A middleware calls next zero or one
// time per job and returns an outcome error as a Handler does.
type Middleware func(next Handler) Handler

// Chain wraps h in mws. The first middleware listed is the outermost: it
// sees the job first and the outcome last. Chain(h, a, b) handles a job as
// a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
