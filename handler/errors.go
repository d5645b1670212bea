package handler

import (
	"errors"
	"fmt"
	"time"
)

// Reasons a job failed permanently. They travel in dead-letter headers and
// metric labels, so they are short and stable.
const (
	// ReasonPermanent: the handler returned Permanent(err).
	ReasonPermanent = "permanent"
	// ReasonDecode: the payload could not be decoded (see [JSON]).
	ReasonDecode = "decode"
	// ReasonPanic: the handler panicked.
	ReasonPanic = "panic"
	// ReasonDeliveryLimit: the job failed on its last delivery.
	ReasonDeliveryLimit = "delivery-limit"
	// ReasonTimeout: the job ran past its timeout (worker.JobTimeout,
	// middleware.Timeout) and was retried.
	ReasonTimeout = "timeout"
	// ReasonRetryAfter: the handler asked for a retry after a delay of
	// its own (see [RetryAfter]).
	ReasonRetryAfter = "retry-after"
	// ReasonUnavailable: a dependency every job needs was down (see
	// [Unavailable]).
	ReasonUnavailable = "unavailable"
)

// PermanentError marks a failure that retrying cannot fix. The worker
// REJECTs the record, or the dlq middleware parks it, instead of releasing
// it for another delivery. Make one with [Permanent]; test for one with
// [IsPermanent] or errors.As.
type PermanentError struct {
	// Reason is one of the Reason constants, or a short reason of the
	// caller's own.
	Reason string
	// Err is the underlying failure.
	Err error
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure (" + e.Reason + ")"
	}
	return "permanent failure (" + e.Reason + "): " + e.Err.Error()
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as a failure that retrying cannot fix, with reason
// [ReasonPermanent]. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Reason: ReasonPermanent, Err: err}
}

// PermanentReason is [Permanent] with a reason of the caller's own (for
// example "invalid-address"), which lands in dead-letter headers and logs.
// PermanentReason(r, nil) returns nil.
func PermanentReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Reason: reason, Err: err}
}

// IsPermanent reports whether err is or wraps a [PermanentError].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryError is a failure worth another delivery, with a reason for logs,
// metrics and dead-letter headers, and optionally the delay the handler
// wants before that delivery. Any error that is not permanent is retried;
// RetryError only adds the reason and the delay. Make one with [Retry] or
// [RetryAfter], or build one to give both a reason and a delay.
type RetryError struct {
	Reason string
	// After, when positive, is how long the worker holds the job (its
	// lock renewed, its handler slot free) before releasing it, in place
	// of the worker's RetryBackoff: the Retry-After of a 429 or 503. The
	// worker honours it up to its hold limits (MaxHold) and not on the
	// last delivery, which the broker archives however it ends.
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	if e.Err == nil {
		return "retry (" + e.Reason + ")"
	}
	return "retry (" + e.Reason + "): " + e.Err.Error()
}

func (e *RetryError) Unwrap() error { return e.Err }

// Retry returns an error that releases the job for another delivery,
// recording reason (for example "rate-limited" or "upstream 503").
func Retry(reason string, err error) error {
	return &RetryError{Reason: reason, Err: err}
}

// RetryAfter returns an error that releases the job for another delivery
// after d (for example the Retry-After of an HTTP 429), with reason
// [ReasonRetryAfter]; see [RetryError.After] for the limits.
//
//	if resp.StatusCode == http.StatusTooManyRequests {
//		return handler.RetryAfter(retryAfter(resp), fmt.Errorf("webhook: %s", resp.Status))
//	}
func RetryAfter(d time.Duration, err error) error {
	return &RetryError{Reason: ReasonRetryAfter, After: d, Err: err}
}

// PanicError is what a recovered panic becomes: the panic value and the
// stack of the goroutine that panicked. The worker wraps it in a
// [PermanentError] with reason [ReasonPanic].
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ReasonOf returns the reason recorded in err: the Reason of the outermost
// [PermanentError], [RetryError] or [UnavailableError] it wraps
// ([ReasonUnavailable] for the last), or "" when there is none.
func ReasonOf(err error) string {
	for err != nil {
		switch e := err.(type) {
		case *PermanentError:
			return e.Reason
		case *RetryError:
			return e.Reason
		case *UnavailableError:
			return ReasonUnavailable
		}
		err = errors.Unwrap(err)
	}
	return ""
}

// UnavailableError reports that a dependency the worker's jobs need is
// down: the database every job writes to, the one API every job calls.
// The job did not fail; it could not be tried. The worker does not spend
// a delivery on it: it pauses (the job is held and its lock renewed, no
// new jobs are fetched or started), re-runs one held job now and then as
// a probe, and when a probe no longer returns an UnavailableError it runs
// every held job again, on the same delivery, and fetches again.
//
// Use it for a dependency that all (or nearly all) jobs of the worker
// share, when the failure says the dependency itself is unreachable
// (connection refused or reset, a timeout acquiring a connection, a
// database failing over). Do not use it for one job's own target: a
// webhook of one customer that is down is an ordinary error (retried with
// backoff, then parked), or the whole worker would pause for one customer.
// Make one with [Unavailable]; test for one with [IsUnavailable] or
// errors.As.
type UnavailableError struct {
	// Dependency names what is down, for logs and metric labels: short
	// and stable ("postgres", "payments-api"), never per job.
	Dependency string
	// Err is the failure that showed it.
	Err error
}

func (e *UnavailableError) Error() string {
	if e.Err == nil {
		return e.Dependency + " unavailable"
	}
	return e.Dependency + " unavailable: " + e.Err.Error()
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable returns an [UnavailableError]: dependency, which every job
// needs, is down, as err shows. Unavailable(d, nil) returns nil.
//
//	if errors.Is(err, syscall.ECONNREFUSED) {
//		return handler.Unavailable("ledger-api", err)
//	}
func Unavailable(dependency string, err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Dependency: dependency, Err: err}
}

// IsUnavailable reports whether err is or wraps an [UnavailableError].
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}
