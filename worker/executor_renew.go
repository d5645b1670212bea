package worker

import (
	"container/heap"
	"time"

	"github.com/shareq/shareq/internal/member"
)

const (
	// renewRetry is how long after a failed renewal the next is sent,
	// while the lock has not run out.
	renewRetry = 250 * time.Millisecond
)

// wakeUp renews the locks that are due, ends jobs over MaxHold and
// releases held jobs whose backoff is over. It scans the tracker (every
// running and held job) only when the tracker has something due, not at
// the end of each retry hold.
func (x *executor) wakeUp() {
	now := x.now()
	x.keysDue(now)
	if x.youngSet && !now.Before(x.youngAt) {
		x.youngSet = false
		x.passYoung(now)
	}
	if x.trackerSet && !now.Before(x.trackerAt) {
		x.trackerSet = false
		due, over := x.tracker.Due(now)
		for _, j := range over {
			switch j.state {
			case jobHeld, jobPaused:
				x.finish(j, AckRelease, OutcomeRetried, j.heldErr(), j.took())
				continue
			case jobQueued: // waited for a slot or a pause that long
				x.finish(j, AckRelease, OutcomeInterrupted, ErrMaxHold, 0)
				continue
			case jobWaiting, jobHalted: // waited for its key or its topic's pause that long: for later
				x.copyOut(j, now)
				continue
			case jobSnoozed: // not due yet: for later
				x.copyOut(j, j.releaseAt())
				continue
			case jobCopying:
				// Its copy is being written (a slow Snoozer or produce):
				// the lock is kept one more MaxHold for it, so that the
				// job is acknowledged as snoozed, not released at a
				// delivery's cost. A copy slower than that gives up.
				if !j.reheld {
					j.reheld = true
					x.tracker.Rehold(j, now)
					continue
				}
				x.finish(j, AckRelease, OutcomeInterrupted, ErrMaxHold, j.took())
				continue
			}
			x.abandon(j, ErrMaxHold)
		}
		if len(due) > 0 {
			keys := make([]member.Key, len(due))
			for i, j := range due {
				keys[i] = j.key()
			}
			x.m.Renew(keys...)
		}
		if at, ok := x.tracker.Next(); ok {
			x.trackerAt, x.trackerSet = at, true
		}
	}
	if !x.holdsUntilQuiet() {
		for len(x.holds) > 0 && !x.holds[0].releaseAt().After(now) {
			j := heap.Pop(&x.holds).(*xjob)
			switch {
			case x.jobs.Get(j.key()) != j:
			case j.state == jobHeld:
				x.finish(j, AckRelease, OutcomeRetried, j.heldErr(), j.took())
			case j.state == jobSnoozed:
				x.unsnooze(j, now)
			}
		}
	}
	x.wakeAt, x.armed = time.Time{}, false
	if x.trackerSet {
		x.arm(x.trackerAt)
	}
	if x.youngSet {
		x.arm(x.youngAt)
	}
	if len(x.keyTimes) > 0 {
		x.arm(x.keyTimes[0].at)
	}
	for len(x.holds) > 0 {
		if j := x.holds[0]; (j.state == jobHeld || j.state == jobSnoozed) && x.jobs.Get(j.key()) == j {
			if !x.holdsUntilQuiet() {
				x.arm(j.releaseAt())
			}
			break
		}
		heap.Pop(&x.holds)
	}
	// A probe that is due waits for a slot or a record, not for time.
	if p := x.pause; p != nil && p.probe == nil && !x.stopping() && p.probeAt.After(now) {
		x.arm(p.probeAt)
	}
}

// trackLater has the tracker renew the lock of j, a job that starts now,
// and end it at MaxHold: at once when either comes within two passes
// over the young jobs, else at the pass before (passYoung), the tracker
// being told then what it would have been told now. Jobs that end before
// that, nearly all short ones, never reach the tracker.
func (x *executor) trackLater(j *xjob, now time.Time) {
	every := youngEvery(j.lock)
	if every <= 0 || x.dueWithin(j, now, 2*every) {
		x.tracker.Add(j, now, j.deadline, j.lock)
		return
	}
	j.young, j.youngIdx = true, int32(len(x.young))
	x.young = append(x.young, j)
	if !x.youngSet {
		x.youngAt, x.youngSet = now.Add(every), true
		x.arm(x.youngAt)
	}
}

// youngEvery is how often the young jobs are looked at, for a lock of
// lock: an eighth of it, within 5 ms and 1 s; 0 when the lock is not
// known (then a job goes to the tracker at once).
func youngEvery(lock time.Duration) time.Duration {
	if lock <= 0 {
		return 0
	}
	return min(max(lock/8, 5*time.Millisecond), time.Second)
}

// dueWithin reports whether j's renewal or MaxHold may come within d of
// now. A renewal is due its margin before the deadline, and a margin is
// at most half the lock (renew.Policy).
func (x *executor) dueWithin(j *xjob, now time.Time, d time.Duration) bool {
	return j.deadline.Sub(now) <= j.lock/2+d || j.start.Add(x.cfg.MaxHold).Sub(now) <= d
}

// passYoung moves the young jobs whose renewal or MaxHold comes within
// two passes into the tracker, with the start they had, and sets the
// next pass while any are left.
func (x *executor) passYoung(now time.Time) {
	for i := 0; i < len(x.young); {
		j := x.young[i]
		if !x.dueWithin(j, now, 2*youngEvery(j.lock)) {
			i++
			continue
		}
		x.dropYoung(j) // the last one moves to i
		x.tracker.Add(j, j.start, j.deadline, j.lock)
		x.armFor(j)
	}
	if len(x.young) > 0 {
		every := time.Second
		for _, j := range x.young {
			every = min(every, youngEvery(j.lock))
		}
		x.youngAt, x.youngSet = now.Add(every), true
	}
}

// dropYoung takes j out of the young jobs.
func (x *executor) dropYoung(j *xjob) {
	i, last := j.youngIdx, len(x.young)-1
	x.young[i] = x.young[last]
	x.young[i].youngIdx = i
	x.young[last] = nil
	x.young = x.young[:last]
	j.young = false
}

// renewed takes the outcome of one renewal.
func (x *executor) renewed(r member.Renewal, now time.Time) {
	j := x.jobs.Get(r.Key)
	if j == nil || j.state == jobGone || (j.state == jobQueued && !j.tracked) {
		return // finished meanwhile
	}
	if x.obs != nil {
		x.obs.LockRenewed(&j.job, r.Err)
	}
	if r.Err == nil {
		x.tracker.RenewedUntil(j, r.Deadline)
		if r.Deadline.After(j.deadline) {
			j.deadline = r.Deadline
		}
		x.armFor(j)
		return
	}
	x.log.Warn("lock renewal failed", "record", r.Key, "error", r.Err)
	if !j.deadline.After(now) {
		if j.state != jobRunning {
			x.finish(j, AckRelease, OutcomeInterrupted, ErrLockLost, j.took())
			return
		}
		x.abandon(j, ErrLockLost)
		return
	}
	x.tracker.RenewFailed(j, now.Add(renewRetry))
	x.armFor(j)
}

// arm makes the wake timer fire at at, unless it fires earlier already.
func (x *executor) arm(at time.Time) {
	if x.armed && !at.Before(x.wakeAt) {
		return
	}
	x.wakeAt, x.armed = at, true
	x.wake.Reset(time.Until(at))
}

// armFor arms the wake timer for j's next renewal or MaxHold.
func (x *executor) armFor(j *xjob) {
	if at, ok := x.tracker.When(j); ok {
		if !x.trackerSet || at.Before(x.trackerAt) {
			x.trackerAt, x.trackerSet = at, true
		}
		x.arm(at)
	}
}

// keepQueuedLocks has the tracker renew the lock of every queued record
// that will need a renewal before the next reading: one that has waited
// for a slot about half its lock. The prefetch keeps a record's wait under
// a quarter of its lock at the job rate it saw, but when jobs suddenly
// take longer (a destination that slows down) the records in hand wait
// for the slow ones ahead of them; a lock that ran out would have the
// broker hand the record out again with a delivery spent and no run.
// Records that start sooner, nearly all of them, are never tracked while
// they wait, so this costs a pass over the queue per reading and nothing
// per job.
func (x *executor) keepQueuedLocks(now time.Time) {
	x.eachQueued(func(j *xjob) {
		if j.state != jobQueued || j.tracked {
			return
		}
		lock := j.lock
		if lock <= 0 {
			lock = x.lockSeen
		}
		if j.deadline.Sub(now) <= lock/2+2*prefetchEvery {
			x.track(j, now)
		}
	})
}

// holdHeap orders held jobs by releaseAt (container/heap).
type holdHeap []*xjob

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, k int) bool { return h[i].releaseAt().Before(h[k].releaseAt()) }
func (h holdHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *holdHeap) Push(v any)        { *h = append(*h, v.(*xjob)) }
func (h *holdHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return j
}
