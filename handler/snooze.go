package handler

import (
	"errors"
	"strconv"
	"time"
)

// Headers the worker sets on the copy of a snoozed job (see [Snooze]).
const (
	// SnoozesHeader counts the times a job was snoozed, in decimal; absent
	// on a job never snoozed. [Job.Snoozes] reads it.
	SnoozesHeader = "shareq-snoozes"
	// NotBeforeHeader is when a snoozed job's copy may run, in Unix
	// milliseconds: a worker that gets it sooner holds it until then.
	NotBeforeHeader = "shareq-not-before"
)

// SnoozeError asks the worker to run the job again after a while, without
// counting the wait as an attempt: the job did not fail, it is not time
// yet (a rate limit's 429 with Retry-After, a customer's quiet hours, a
// resource still being prepared). Make one with [Snooze]; test for one
// with [SnoozeOf] or errors.As.
//
// The worker keeps the delivery it has: a snooze that ends within the
// worker's MaxHold holds the record, its lock renewed and no handler slot
// taken, and runs the job again on the same delivery; a longer one
// produces a copy of the job (same key, value, headers and job ID, its
// [SnoozesHeader] raised by one and [NotBeforeHeader] set) to the same
// topic (or hands it to the worker's Snoozer, such as pgoutbox.Snoozer)
// and then accepts the original. The copy's first delivery runs it when
// it is due. With the idempotency middleware the snoozed run's claim is
// rolled back and the copy, which keeps the job ID, claims the same key,
// so a copy written twice (a worker killed between the copy and the
// accept) still runs the job once.
type SnoozeError struct {
	// After is how long from now the job runs again.
	After time.Duration
}

func (e *SnoozeError) Error() string {
	return "snoozed for " + e.After.String()
}

// Snooze returns a [SnoozeError]: run the job again after d, spending no
// delivery. d below a millisecond is taken as a millisecond.
//
//	if resp.StatusCode == http.StatusTooManyRequests {
//		return handler.Snooze(retryAfter(resp))
//	}
func Snooze(d time.Duration) error {
	return &SnoozeError{After: max(d, time.Millisecond)}
}

// SnoozeOf returns how long err (or an error it wraps) asks the job to be
// snoozed for, and whether it is a [SnoozeError].
func SnoozeOf(err error) (time.Duration, bool) {
	var s *SnoozeError
	if errors.As(err, &s) {
		return s.After, true
	}
	return 0, false
}

// Snoozes returns how many times the job was snoozed before this run
// (its [SnoozesHeader]); 0 for a job never snoozed.
func (j *Job) Snoozes() int {
	v, ok := j.Header(SnoozesHeader)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// NotBefore returns when the job may run: its [NotBeforeHeader], set on
// a snoozed job's copy; the zero time if it has none.
func (j *Job) NotBefore() time.Time {
	v, ok := j.Header(NotBeforeHeader)
	if !ok {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// KeyUnavailableError reports that what this one job calls is down: its
// webhook endpoint, its customer's mail server. The worker opens the
// breaker of the job's limit key (worker.KeyLimit): the job and every
// other job of that key wait, spending no delivery and taking no handler
// slot, while one job of the key now and then probes it; jobs of other
// keys run on. The first probe that does not return a KeyUnavailableError
// closes the breaker. On a topic without a key limit it is an ordinary
// retryable error. Make one with [KeyUnavailable].
type KeyUnavailableError struct {
	// Err is the failure that showed it.
	Err error
}

func (e *KeyUnavailableError) Error() string {
	if e.Err == nil {
		return "key unavailable"
	}
	return "key unavailable: " + e.Err.Error()
}

func (e *KeyUnavailableError) Unwrap() error { return e.Err }

// KeyUnavailable returns a [KeyUnavailableError]: the destination of
// this job's limit key is down, as err shows. KeyUnavailable(nil)
// returns nil.
//
//	if errors.Is(err, syscall.ECONNREFUSED) || resp.StatusCode >= 500 {
//		return handler.KeyUnavailable(err)
//	}
func KeyUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return &KeyUnavailableError{Err: err}
}

// IsKeyUnavailable reports whether err is or wraps a
// [KeyUnavailableError].
func IsKeyUnavailable(err error) bool {
	var u *KeyUnavailableError
	return errors.As(err, &u)
}
