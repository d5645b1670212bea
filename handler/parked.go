package handler

import (
	"errors"
	"fmt"
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

// ParkedError is what a dead-letter middleware (the dlq package) returns
// once it has parked a job: the job is done with although its handler
// failed. The worker classifies it with errors.As, ACCEPTs the record and
// reports the job as parked, never as a success. Middleware outside the
// dead-letter middleware sees it too (and may log or count it); it must
// return it, or an error wrapping it, for the worker to see the park.
// Unwrap gives the failure the job was parked for.
type ParkedError struct {
	DeadLetter DeadLetter
}

// Parked returns a [*ParkedError] for a job parked as dl says.
func Parked(dl DeadLetter) error { return &ParkedError{DeadLetter: dl} }

func (e *ParkedError) Error() string {
	s := fmt.Sprintf("parked in %s (partition %d, offset %d)", e.DeadLetter.Topic, e.DeadLetter.Partition, e.DeadLetter.Offset)
	if e.DeadLetter.Reason != "" {
		s += ", reason " + e.DeadLetter.Reason
	}
	if e.DeadLetter.Err != nil {
		s += ": " + e.DeadLetter.Err.Error()
	}
	return s
}

// Unwrap returns the failure the job was parked for.
func (e *ParkedError) Unwrap() error { return e.DeadLetter.Err }

// ParkedOf returns the dead letter of the [*ParkedError] in err's chain,
// and whether there is one.
func ParkedOf(err error) (DeadLetter, bool) {
	var pe *ParkedError
	if errors.As(err, &pe) {
		return pe.DeadLetter, true
	}
	return DeadLetter{}, false
}

// CancelledError is what a middleware returns for a job that was
// cancelled before it ran, so its handler did not run: the idempotency
// middleware returns one when the job's claim key holds a cancel
// (pgoutbox.CancelTx with pgoutbox.ClaimKey). The worker classifies it
// with errors.As, ACCEPTs the record and reports the job as cancelled,
// never as a success. Err says why (nil: no reason given).
type CancelledError struct {
	Err error
}

// Cancelled returns a [*CancelledError] with err as its reason.
func Cancelled(err error) error { return &CancelledError{Err: err} }

func (e *CancelledError) Error() string {
	if e.Err == nil {
		return "job cancelled before it ran"
	}
	return "job cancelled before it ran: " + e.Err.Error()
}

// Unwrap returns the reason.
func (e *CancelledError) Unwrap() error { return e.Err }

// IsCancelled reports whether err's chain holds a [*CancelledError].
func IsCancelled(err error) bool {
	var ce *CancelledError
	return errors.As(err, &ce)
}
