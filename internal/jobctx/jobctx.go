// Package jobctx carries what shareq's own middleware and the worker tell
// each other about a job's run through its context, without exporting it:
// that the run is a worker's (so middleware leaves the outcome's log line
// to the worker), and that a dead-letter middleware around the rest of the
// chain parks the job when it fails (so middleware inside it does not log
// a parked failure as a lost job). Values are set on the context a caller
// passes down; nothing is written back up.
package jobctx

import (
	"context"

	"github.com/shareq/shareq/handler"
)

type workerKey struct{}

// WithWorker marks ctx as the base context of a worker's jobs: the worker
// reports and logs each job's outcome itself.
func WithWorker(ctx context.Context) context.Context {
	return context.WithValue(ctx, workerKey{}, true)
}

// InWorker reports whether ctx is a job's context in a worker
// ([WithWorker]).
func InWorker(ctx context.Context) bool {
	v, _ := ctx.Value(workerKey{}).(bool)
	return v
}

type parkerKey struct{}

// parkerAny and parkerPermanent are the two values of parkerKey: a
// dead-letter middleware that parks any failure (the job's last delivery)
// or only permanent ones.
var (
	parkerAny       = &struct{ any bool }{any: true}
	parkerPermanent = &struct{ any bool }{any: false}
)

// WithParker returns the context a dead-letter middleware passes to the
// rest of the chain: it parks the job if it fails permanently
// ([handler.IsPermanent]) or, when anyFailure, if it fails at all except
// for a dependency that is down ([handler.IsUnavailable]).
func WithParker(ctx context.Context, anyFailure bool) context.Context {
	if anyFailure {
		return context.WithValue(ctx, parkerKey{}, parkerAny)
	}
	return context.WithValue(ctx, parkerKey{}, parkerPermanent)
}

// WillPark reports whether a dead-letter middleware around the caller
// ([WithParker]) parks the job when it fails with err, a non-nil error.
func WillPark(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	p, _ := ctx.Value(parkerKey{}).(*struct{ any bool })
	if p == nil {
		return false
	}
	return handler.IsPermanent(err) || p.any && !Held(ctx, err)
}

type breakerKey struct{}

// WithKeyBreaker marks ctx as the context of a job whose topic has a key
// limit: a [handler.KeyUnavailableError] opens its key's breaker, and the
// worker holds the job instead of spending its delivery.
func WithKeyBreaker(ctx context.Context) context.Context {
	return context.WithValue(ctx, breakerKey{}, true)
}

// Held reports whether the worker holds a job that failed with err, a
// non-permanent error, on its delivery instead of releasing it: a
// dependency down ([handler.UnavailableError]), a snooze
// ([handler.SnoozeError]), or its key's destination down
// ([handler.KeyUnavailableError]) where the job has a key breaker
// ([WithKeyBreaker]). Such a job is not parked on its last delivery: it
// has not used it up.
func Held(ctx context.Context, err error) bool {
	if handler.IsUnavailable(err) {
		return true
	}
	if _, ok := handler.SnoozeOf(err); ok {
		return true
	}
	b, _ := ctx.Value(breakerKey{}).(bool)
	return b && handler.IsKeyUnavailable(err)
}
