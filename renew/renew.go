// Package renew decides when the locks of running jobs are renewed.
//
// A share group locks each delivered record for a limited time (Kafka's
// default is 30 s). A job that runs longer must renew its lock (the RENEW
// acknowledgement, Kafka 4.2+) or the broker hands the record to another
// member while the first is still working on it. A [Tracker] keeps the lock
// deadline of every running job of one lane, says which locks are due for
// renewal and which jobs have held their record for the maximum hold time,
// and when to look again.
//
// The broker does not report the new deadline after a renewal, so the
// tracker computes it: the time the renewal was sent plus the lock
// duration, estimated per record as the time left on the lock when the
// record arrived (never longer than the real lock duration).
//
// A Tracker is not safe for concurrent use: it belongs to the goroutine
// that polls and acknowledges the lane's records.
package renew

import (
	"errors"
	"fmt"
	"time"
)

// Policy says when locks are renewed.
type Policy struct {
	// Margin is how long before its deadline a lock is renewed. Zero, or
	// a margin of more than half the lock duration, means half the lock
	// duration: a renewal every half lock period.
	Margin time.Duration
	// MaxHold is how long one delivery of a job may keep its lock. A job
	// that has held its record this long is reported by [Tracker.Due] as
	// over its hold time and is not renewed again. Must be positive.
	MaxHold time.Duration
}

// Validate reports a policy that cannot work.
func (p Policy) Validate() error {
	var errs []error
	if p.Margin < 0 {
		errs = append(errs, fmt.Errorf("renew: Margin %v must not be negative", p.Margin))
	}
	if p.MaxHold <= 0 {
		errs = append(errs, fmt.Errorf("renew: MaxHold %v must be positive", p.MaxHold))
	}
	return errors.Join(errs...)
}

type entry struct {
	start    time.Time     // when the record arrived
	deadline time.Time     // when the lock runs out, as far as we know
	lockDur  time.Duration // estimated lock duration
	pending  bool          // a renewal was sent and is not yet confirmed
	retryAt  time.Time     // after a failed renewal, not before this
	over     bool          // reported as over MaxHold already
}

// Tracker keeps the lock deadlines of a lane's running jobs, keyed by K.
type Tracker[K comparable] struct {
	policy Policy
	jobs   map[K]*entry
}

// NewTracker returns an empty tracker following p.
func NewTracker[K comparable](p Policy) *Tracker[K] {
	return &Tracker[K]{policy: p, jobs: make(map[K]*entry)}
}

// Add starts tracking a job whose record arrived at now with the lock
// deadline given by the broker. lockDur is the lock duration a renewal
// buys; when it is not positive it is estimated as deadline - now, which
// is never longer than the real duration. A deadline at or before now
// means the lock has run out; such a job should not be started (see
// [Expired]).
func (t *Tracker[K]) Add(k K, now, deadline time.Time, lockDur time.Duration) {
	if lockDur <= 0 {
		lockDur = deadline.Sub(now)
	}
	t.jobs[k] = &entry{start: now, deadline: deadline, lockDur: lockDur}
}

// Remove stops tracking k.
func (t *Tracker[K]) Remove(k K) { delete(t.jobs, k) }

// Len returns the number of tracked jobs.
func (t *Tracker[K]) Len() int { return len(t.jobs) }

// Deadline returns the lock deadline of k as far as the tracker knows.
func (t *Tracker[K]) Deadline(k K) time.Time {
	if e := t.jobs[k]; e != nil {
		return e.deadline
	}
	return time.Time{}
}

// Expired reports whether a lock deadline leaves less than min to run a
// job: the job should be released without running.
func Expired(now, deadline time.Time, min time.Duration) bool {
	return deadline.Sub(now) < min
}

func (t *Tracker[K]) margin(e *entry) time.Duration {
	half := e.lockDur / 2
	if t.policy.Margin > 0 && t.policy.Margin < half {
		return t.policy.Margin
	}
	return half
}

func (t *Tracker[K]) renewAt(e *entry) time.Time { return e.deadline.Add(-t.margin(e)) }

func (t *Tracker[K]) holdEnd(e *entry) time.Time { return e.start.Add(t.policy.MaxHold) }

// Due returns the jobs whose locks should be renewed now, and the jobs that
// reached MaxHold since the last call (each reported once). A job with a
// renewal pending is not returned for renewal again until [Tracker.Renewed]
// or [Tracker.RenewFailed] is called for it.
func (t *Tracker[K]) Due(now time.Time) (renew, overHold []K) {
	for k, e := range t.jobs {
		if e.over {
			continue
		}
		if !now.Before(t.holdEnd(e)) {
			e.over = true
			overHold = append(overHold, k)
			continue
		}
		if !e.pending && e.lockDur > 0 && !now.Before(t.renewAt(e)) && !now.Before(e.retryAt) {
			e.pending = true
			renew = append(renew, k)
		}
	}
	return renew, overHold
}

// Renewed records that the renewal of k sent at sentAt was confirmed: the
// new deadline is sentAt plus the lock duration.
func (t *Tracker[K]) Renewed(k K, sentAt time.Time) {
	if e := t.jobs[k]; e != nil {
		e.pending = false
		if d := sentAt.Add(e.lockDur); d.After(e.deadline) {
			e.deadline = d
		}
	}
}

// RenewFailed records that the renewal of k was not confirmed. The
// deadline stays as it was (the lock may already be lost) and the next
// attempt is not due before retryAt.
func (t *Tracker[K]) RenewFailed(k K, retryAt time.Time) {
	if e := t.jobs[k]; e != nil {
		e.pending = false
		e.retryAt = retryAt
	}
}

// Next returns when [Tracker.Due] next has something to report, and false
// when no job is tracked or every job is waiting on a renewal or over its
// hold time.
func (t *Tracker[K]) Next() (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(at time.Time) {
		if !found || at.Before(next) {
			next, found = at, true
		}
	}
	for _, e := range t.jobs {
		if e.over {
			continue
		}
		consider(t.holdEnd(e))
		if !e.pending && e.lockDur > 0 {
			at := t.renewAt(e)
			if e.retryAt.After(at) {
				at = e.retryAt
			}
			consider(at)
		}
	}
	return next, found
}
