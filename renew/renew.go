// Package renew decides when the locks of running jobs are renewed.
//
// A share group locks each delivered record for a limited time (Kafka's
// default is 30 s). A job that runs longer must renew its lock (the RENEW
// acknowledgement, Kafka 4.2+) or the broker hands the record to another
// member while the first is still working on it. A [Tracker] keeps the lock
// deadline of every running job of one worker, says which locks are due for
// renewal and which jobs have held their record for the maximum hold time,
// and when to look again.
//
// franz-go's share consumer does not report the new deadline after a
// renewal, so [Tracker.Renewed] computes it: the time the renewal was sent
// plus the lock duration, estimated per record as the time left on the
// lock when the record arrived (never longer than the real lock duration).
// shareq's own share-group member does report it; [Tracker.RenewedUntil]
// takes it as given.
//
// A Tracker is not safe for concurrent use: it belongs to the goroutine
// that decides the worker's acknowledgements (its executor).
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

// Tracker keeps the lock deadlines of a worker's running jobs, keyed by K.
type Tracker[K comparable] struct {
	policy Policy
	jobs   map[K]*entry
	free   []*entry // removed entries, reused by Add
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
	var e *entry
	if n := len(t.free); n > 0 {
		e, t.free = t.free[n-1], t.free[:n-1]
	} else {
		e = new(entry)
	}
	*e = entry{start: now, deadline: deadline, lockDur: lockDur}
	if old := t.jobs[k]; old != nil {
		t.free = append(t.free, old)
	}
	t.jobs[k] = e
}

// Remove stops tracking k.
func (t *Tracker[K]) Remove(k K) {
	if e := t.jobs[k]; e != nil {
		delete(t.jobs, k)
		t.free = append(t.free, e)
	}
}

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

// RenewedUntil records that the renewal of k was confirmed with the given
// new deadline (as the party that sent it computed it). A deadline earlier
// than the one tracked is ignored.
func (t *Tracker[K]) RenewedUntil(k K, deadline time.Time) {
	if e := t.jobs[k]; e != nil {
		e.pending = false
		if deadline.After(e.deadline) {
			e.deadline = deadline
		}
	}
}

// Relock records that k's record was acquired again, with a new deadline
// and lock duration (its lock ran out and the same member fetched it
// again): the lock is tracked from there, a renewal pending for the old
// lock no longer holds back the next one, and the hold time still counts
// from the first Add. A lockDur that is not positive keeps the old one.
func (t *Tracker[K]) Relock(k K, deadline time.Time, lockDur time.Duration) {
	if e := t.jobs[k]; e != nil {
		e.pending = false
		e.retryAt = time.Time{}
		e.deadline = deadline
		if lockDur > 0 {
			e.lockDur = lockDur
		}
	}
}

// Rehold starts k's hold time again at now, over MaxHold or not: its lock
// is renewed again until the new hold time ends. It is for a job past
// MaxHold that must keep its record a little longer for a good reason
// (a copy of it being written, after which it is acknowledged); the
// caller bounds how often.
func (t *Tracker[K]) Rehold(k K, now time.Time) {
	if e := t.jobs[k]; e != nil {
		e.start, e.over = now, false
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
// hold time. It looks at every job; see [Tracker.When] for one.
func (t *Tracker[K]) Next() (time.Time, bool) {
	var next time.Time
	found := false
	for _, e := range t.jobs {
		if at, ok := t.when(e); ok && (!found || at.Before(next)) {
			next, found = at, true
		}
	}
	return next, found
}

// When returns when [Tracker.Due] next has something to report about k,
// and false when k is not tracked, waits on a renewal or is over its hold
// time. A caller that keeps one wake-up time can move it earlier with
// When after each Add, Renewed or RenewFailed, instead of calling Next.
func (t *Tracker[K]) When(k K) (time.Time, bool) {
	if e := t.jobs[k]; e != nil {
		return t.when(e)
	}
	return time.Time{}, false
}

func (t *Tracker[K]) when(e *entry) (time.Time, bool) {
	if e.over {
		return time.Time{}, false
	}
	next := t.holdEnd(e)
	if !e.pending && e.lockDur > 0 {
		at := t.renewAt(e)
		if e.retryAt.After(at) {
			at = e.retryAt
		}
		if at.Before(next) {
			next = at
		}
	}
	return next, true
}
