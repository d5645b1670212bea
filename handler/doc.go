// Package handler holds the types a shareq job handler is written against:
// the [Job] a handler receives, the [Handler] interface with its [Func] and
// typed [JSON] adapters, the outcome errors that tell the worker how to
// acknowledge a job, and [Middleware] with [Chain]. A handler may also
// report its job's result ([Job.SetResult]) and progress ([Job.Progress])
// for observers such as the job log (joblog/pgjoblog) to keep.
//
// The package imports only the standard library, so code that defines
// handlers does not depend on Kafka or on the worker.
//
// # Outcomes
//
// A handler's return value decides how the worker acknowledges the record
// the job came from:
//
//	handler result                                   acknowledgement                        outcome
//	nil                                              ACCEPT                                 succeeded
//	Permanent(err), a decode failure, a panic        REJECT (or parked in the DLQ, then     discarded (parked)
//	                                                 ACCEPT)
//	any other error, delivery count below the limit  RELEASE after a retry backoff          retried
//	(a job timeout's included)                       (delivered again)
//	Unavailable(dependency, err)                     none: held on its delivery while the   (none yet)
//	                                                 worker pauses; runs again when back
//	any other error on the last delivery             RELEASE; the broker archives it        discarded (parked)
//	                                                 (or parked in the DLQ, then ACCEPT)
//	context cancelled by shutdown or the hold limit  RELEASE                                interrupted
//	Parked(dl), from a dead-letter middleware        ACCEPT                                 parked
//	Cancelled(err), from the idempotency middleware  ACCEPT (the handler did not run)       cancelled
//
// The outcome is what the worker reports (worker.Result.Outcome, its log,
// the metrics): a job the dlq middleware parked is ACCEPTed, but reported
// as parked, never as a success. The middleware says so by returning a
// [*ParkedError] ([Parked]), which the worker classifies with errors.As
// and other middleware can read with [ParkedOf]. Likewise a job whose
// claim holds a cancel (the idempotency middleware with
// idempotency/pgstore, after pgoutbox.CancelTx) is ACCEPTed without
// running and reported as cancelled: the middleware returns a
// [*CancelledError] ([Cancelled], [IsCancelled]). Middleware that wraps
// others passes these errors on, as it does any other.
//
// RELEASE makes the record available again at once, to any member of the
// share group, with its delivery count raised by one; the worker holds a
// failed record for a backoff first (see worker.RetryBackoff) so a failing
// dependency does not use up the delivery limit in moments; a dependency
// that every job needs and that is down should be reported with
// [Unavailable], which pauses the worker instead of spending deliveries.
// The broker stops
// delivering a record once its delivery count reaches the group's delivery
// limit (5 by default) and archives it; the dlq package parks such a job on
// its last delivery instead.
//
// # At-least-once
//
// Share groups deliver every record at least once, not exactly once. A job
// runs again when its lock runs out while it is still running, when a worker
// dies after the side effect but before the ACCEPT reaches the broker, or
// when an ACCEPT is lost with a connection. Write handlers so that running a
// job twice is harmless: use [Job.ID] as an idempotency key, or use the
// idempotency package, which records the job's key in the same database
// transaction as its side effects.
package handler
