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
// [PermanentError] or [RetryError] it wraps, or "" when there is none.
func ReasonOf(err error) string {
	for err != nil {
		switch e := err.(type) {
		case *PermanentError:
			return e.Reason
		case *RetryError:
			return e.Reason
		}
		err = errors.Unwrap(err)
	}
	return ""
}
