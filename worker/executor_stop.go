package worker

import (
	"strings"
	"time"
)

const (
	// stuckWarnEvery is how often a stopped executor says it still waits
	// for handlers that ignore their cancelled context.
	stuckWarnEvery = 5 * time.Second
)

// phase is where the executor is in its life: running, then the steps of
// the stop sequence (see executor) in order. It only moves forward, in
// enter.
type phase int8

const (
	// phaseRunning: fetching and running jobs.
	phaseRunning phase = iota
	// phaseDraining: ctx is done (step 1). No more fetches or credit; the
	// jobs in hand, and the records of the fetch in flight, still run;
	// failed jobs are held, without a backoff, until the member is quiet.
	phaseDraining
	// phaseReleasing: the member is quiet (step 2); jobs held for retry
	// were released, running ones may finish until the shutdown deadline.
	phaseReleasing
	// phaseExpired: the shutdown deadline passed (step 3); every job was
	// cancelled and released, and a record that still arrives is
	// released at once. The executor leaves in the same turn of its loop.
	phaseExpired
	// phaseLeft: Leave was called (step 4), or the member stopped on its
	// own; the executor reads Events until it closes (step 5).
	phaseLeft
)

func (p phase) String() string {
	switch p {
	case phaseRunning:
		return "running"
	case phaseDraining:
		return "draining"
	case phaseReleasing:
		return "releasing"
	case phaseExpired:
		return "expired"
	case phaseLeft:
		return "left"
	}
	return "unknown"
}

// enter moves the executor to phase p, the one place its phase changes.
// The phase only moves forward: a signal that comes after a later step
// (the member quiet after the deadline, the deadline after Leave) changes
// nothing, because the later step has done everything the earlier one
// would.
func (x *executor) enter(p phase) {
	if p <= x.phase {
		return
	}
	x.phase = p
}

// stopping reports whether the stop has begun (ctx is done, or the member
// stopped): no credit, no prefetch, no backoff, no probes; jobs that would
// wait are copied for later.
func (x *executor) stopping() bool { return x.phase >= phaseDraining }

// holdsUntilQuiet reports whether failed jobs are held until the member
// is quiet instead of being released when their backoff ends: while
// draining, a released record could be fetched again by this member on
// its last delivery and archived unhandled.
func (x *executor) holdsUntilQuiet() bool { return x.phase == phaseDraining }

// gone reports whether the shutdown deadline passed or the executor left:
// a record that arrives now is released at once.
func (x *executor) gone() bool { return x.phase >= phaseExpired }

// beginStop is step 1, when ctx is done: fetch no more and grant no more
// credit (run then waits for the member's Quiet, step 2, and starts the
// shutdown timer, step 3).
func (x *executor) beginStop() {
	x.logStopping()
	x.enter(phaseDraining)
	x.prefetch, x.chunk = 0, 0
	x.m.StopFetching()
}

// logStopping logs the start of the graceful stop: what is in hand and
// how long it may take.
func (x *executor) logStopping() {
	var held, paused int
	for _, j := range x.jobs.All() {
		switch j.state {
		case jobHeld:
			held++
		case jobPaused:
			paused++
		}
	}
	args := []any{"running", x.running, "queued", x.queued, "held_for_retry", held, "shutdown_timeout", x.cfg.ShutdownTimeout}
	if x.waiting+x.snoozed > 0 {
		args = append(args, "waiting_for_keys", x.waiting, "snoozed", x.snoozed)
	}
	if x.pause != nil {
		args = append(args, "held_for_pause", paused, "dependencies_down", strings.Join(x.pause.deps, ","))
	}
	args = x.logTopicPauses(args)
	x.log.Info("worker stopping: fetching no more; running jobs may finish until the shutdown timeout, held ones are released", args...)
}

// releaseHeld is step 2, once the member is quiet (and every record it
// fetched was taken from Events): it releases every job held for retry,
// and, while paused, the jobs held for the pause and the queued ones,
// which would not start before the shutdown deadline.
func (x *executor) releaseHeld() {
	x.enter(phaseReleasing)
	now := x.now()
	for _, j := range x.jobs.All() {
		switch {
		case j.state == jobHeld, j.state == jobPaused && x.pause != nil:
			x.finish(j, AckRelease, OutcomeRetried, j.heldErr(), j.took())
		case j.state == jobQueued && x.pause != nil:
			x.finish(j, AckRelease, OutcomeInterrupted, ErrShutdown, 0)
		case j.state == jobSnoozed:
			// Not due before the stop: copied for later, no delivery
			// spent.
			x.copyOut(j, j.releaseAt())
		case j.state == jobWaiting && j.ks != nil && j.ks.open:
			x.copyOut(j, now) // its key is down: for later too
		case j.state == jobHalted:
			x.copyOut(j, now) // its topic is paused: for later too
		}
	}
	x.holds = x.holds[:0]
	x.haltLine = nil
}

// expire is step 3, at the shutdown deadline: running handlers are
// cancelled and every record in hand released.
func (x *executor) expire() {
	x.enter(phaseExpired)
	for _, j := range x.jobs.All() {
		switch j.state {
		case jobRunning:
			x.abandon(j, ErrShutdown)
		case jobHeld, jobPaused:
			x.finish(j, AckRelease, OutcomeRetried, ErrShutdown, j.took())
		case jobQueued, jobWaiting, jobSnoozed, jobCopying, jobHalted:
			x.finish(j, AckRelease, OutcomeInterrupted, ErrShutdown, j.took())
		}
	}
	x.haltLine = nil
	x.resetQueue()
	x.queued = 0
	x.holds = x.holds[:0]
}

// leaveWhenDone is step 4, checked at the end of every turn of the loop:
// once the member is quiet or the deadline passed, and no job is left,
// Leave sends the final acknowledgements and releases, and leaves the
// group; Events closes after.
func (x *executor) leaveWhenDone() {
	if (x.phase == phaseReleasing || x.phase == phaseExpired) && x.jobs.Len() == 0 {
		x.enter(phaseLeft)
		x.m.Leave()
	}
}

// finishStop is step 5, once Events closed: it ends the pauses, logs what
// is left to log, and waits for every handler goroutine and copy.
func (x *executor) finishStop() {
	if x.pause != nil {
		x.endPause(x.pause, time.Since(x.pause.since), false)
	}
	x.endTopicPauses()
	x.warnAcks(true)
	x.summarizeBreakers(x.now(), true)
	x.waitHandlers()
	x.copiers.Wait()
}

// memberFailed ends every job when Events closed before Leave: the member
// stopped, so nothing can be acknowledged any more. It skips the rest of
// the stop sequence to step 5.
func (x *executor) memberFailed() {
	x.log.Warn("the share-group member stopped; cancelling running jobs", "jobs", x.jobs.Len())
	x.enter(phaseLeft)
	for _, j := range x.jobs.All() {
		x.drop(j, ErrShutdown)
	}
	x.resetQueue()
}

// waitHandlers waits for every handler goroutine, abandoned ones included.
func (x *executor) waitHandlers() {
	x.hand.flush()
	if x.running > 0 {
		stuck := time.NewTicker(stuckWarnEvery)
		for x.running > 0 {
			select {
			case <-x.hand.ready:
				x.running -= len(x.hand.take())
			case <-stuck.C:
				x.log.Warn("waiting for handlers that ignore their cancelled context; their records were released", "handlers", x.running)
			}
		}
		stuck.Stop()
	}
	x.hand.close()
	x.wg.Wait()
}
