package handler

import (
	"context"
	"sync"
)

// DeadLetter describes a job that a dead-letter middleware (the dlq package)
// parked: it wrote the job to a dead-letter topic, so the job is done with
// although its handler failed. The worker reports such a job as parked,
// never as a success, while still ACCEPTing its record.
type DeadLetter struct {
	// Topic, Partition and Offset locate the dead-letter record.
	Topic     string
	Partition int32
	Offset    int64
	// Reason is why the job was parked: one of the Reason constants
	// (ReasonPermanent, ReasonDeliveryLimit, ...) or a reason of the
	// handler's own.
	Reason string
	// Err is the failure the job was parked for.
	Err error
}

type parkNoteKey struct{}

// parkNote is where a job's run records that the job was parked. The
// worker reads it after the handler returned; a mutex keeps a handler
// that parks from a goroutine of its own safe. It is its own context (the
// parent's, plus itself as a value): one allocation per job.
type parkNote struct {
	context.Context
	mu     sync.Mutex
	parked *DeadLetter
	// cancelled: the job was cancelled before it ran (NoteCancelled).
	cancelled bool
	// parker: a dead-letter middleware runs around the rest of the
	// chain (ExpectPark); parkAny: it parks this delivery whatever the
	// error, not only a permanent one.
	parker, parkAny bool
}

func (n *parkNote) Value(key any) any {
	if key == (parkNoteKey{}) {
		return n
	}
	return n.Context.Value(key)
}

// WithParkNote returns a context that carries an empty note for
// [NoteParked]. The worker gives every job's context a fresh one; tests
// that run a handler chain without a worker can do the same and read it
// with [ParkedFrom].
func WithParkNote(ctx context.Context) context.Context {
	return &parkNote{Context: ctx}
}

// NoteParked records in the note ctx carries (see [WithParkNote]) that the
// job was parked, as p says. A middleware that parks a job calls it and
// then returns nil: the worker ACCEPTs the record and reports the job as
// parked. It reports whether ctx carries a note (false outside a worker,
// where nobody asks).
func NoteParked(ctx context.Context, p DeadLetter) bool {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return false
	}
	n.mu.Lock()
	n.parked = &p
	n.mu.Unlock()
	return true
}

// ParkedFrom returns what [NoteParked] recorded in ctx's note, and whether
// the job was parked. Middleware outside the dlq middleware can use it to
// tell a parked job from a success (middleware.Logging does).
func ParkedFrom(ctx context.Context) (DeadLetter, bool) {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return DeadLetter{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.parked == nil {
		return DeadLetter{}, false
	}
	return *n.parked, true
}

// ExpectPark records in the note ctx carries (see [WithParkNote]) that a
// dead-letter middleware runs around the rest of the handler chain and
// parks the job if it fails permanently ([IsPermanent]) or, when
// anyFailure, if it fails at all (its last delivery). The dlq middleware
// calls it before it calls the next handler, so that middleware inside it
// can tell a failure that ends in the dead-letter topic from one that is
// retried ([WillPark]), and [EndExpectPark] when the next handler
// returned, so that middleware outside it does not take the expectation
// for its own. It reports whether ctx carries a note.
func ExpectPark(ctx context.Context, anyFailure bool) bool {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return false
	}
	n.mu.Lock()
	n.parker, n.parkAny = true, anyFailure
	n.mu.Unlock()
	return true
}

// EndExpectPark withdraws what [ExpectPark] recorded in ctx's note: the
// dead-letter middleware's inner handler returned, and whether the job
// was parked is now for [ParkedFrom] to say.
func EndExpectPark(ctx context.Context) {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return
	}
	n.mu.Lock()
	n.parker, n.parkAny = false, false
	n.mu.Unlock()
}

// WillPark reports whether a dead-letter middleware around the caller
// said ([ExpectPark]) that it parks the job when it fails with err, a
// non-nil error. Middleware that logs failures (middleware.Logging) uses
// it to leave the parked job's line to the worker, which logs the park
// with its reason and dead-letter topic.
func WillPark(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parker && (IsPermanent(err) || n.parkAny && !IsUnavailable(err))
}

// NoteCancelled records in the note ctx carries (see [WithParkNote]) that
// the job was cancelled before it ran, so its handler did not run: the
// idempotency middleware calls it when the job's claim key holds a
// cancel (pgoutbox.CancelTx with pgoutbox.ClaimKey) and then returns nil.
// The worker ACCEPTs the record and reports the job as cancelled, never as
// a success. It reports whether ctx carries a note (false outside a
// worker, where nobody asks).
func NoteCancelled(ctx context.Context) bool {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return false
	}
	n.mu.Lock()
	n.cancelled = true
	n.mu.Unlock()
	return true
}

// CancelledFrom reports whether [NoteCancelled] recorded in ctx's note
// that the job was cancelled. Middleware outside the idempotency
// middleware can use it to tell a cancelled job from a success
// (middleware.Logging does).
func CancelledFrom(ctx context.Context) bool {
	n, ok := ctx.Value(parkNoteKey{}).(*parkNote)
	if !ok || n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cancelled
}
