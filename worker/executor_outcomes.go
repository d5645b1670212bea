package worker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/member"
)

const (
	// ackWarnEvery bounds the warnings about failed acknowledgements to
	// one line per period, with a count of those left out.
	ackWarnEvery = 5 * time.Second
)

// result takes a handler's outcome.
func (x *executor) result(r xresult) {
	x.running--
	x.completed++
	j := r.j
	if j.state != jobRunning { // (a job in any state but jobGone is the one of its key in x.jobs)
		return // abandoned earlier; its record was released
	}
	now := x.now()
	keyDown := x.keyResult(j, r.err, r.took, now)
	x.keyStopped(j, now)
	ue := unavailableOf(r.err)
	unavailable := ue != nil
	probe := x.pause != nil && x.pause.probe == j
	if probe {
		x.pause.probe = nil
		if !unavailable {
			x.resume() // the dependency is back; j's outcome is decided below
		}
	}
	if r.err == nil || handler.IsPermanent(r.err) {
		if gone, why := x.lockGone(j, now); gone {
			x.doneWithoutLock(j, r, why)
			return
		}
	}
	switch {
	case r.err == nil && r.snooze > 0:
		x.snooze(j, r, now)
		return
	case r.err == nil && r.parked != nil:
		x.m.Ack(j.key(), member.Accept)
		x.end(j, nil)
		x.report(j, AckAccept, OutcomeParked, r.parked.Err, r.took, r.parked)
		return
	case r.err == nil && r.cancelled:
		x.finish(j, AckAccept, OutcomeCancelled, nil, r.took)
		return
	case r.err == nil:
		x.finish(j, AckAccept, OutcomeSucceeded, nil, r.took)
		return
	case handler.IsPermanent(r.err):
		x.finish(j, AckReject, OutcomeDiscarded, r.err, r.took)
		return
	}
	if keyDown {
		// Its key's destination is down: the job waits for the breaker,
		// on this delivery, first in its key's line; while stopping it
		// is copied for later.
		j.setOutcome(r.err, r.took)
		j.cancel(nil)
		if x.stopping() {
			x.copyOut(j, now)
			return
		}
		x.waitForKey(j, now, true)
		return
	}
	if unavailable && !x.stopping() {
		// Not the job's failure: hold it, on this delivery, until the
		// dependency is back. While stopping it is released like a
		// retry (below).
		x.pauseJob(j, r, ue, probe)
		return
	}
	// While stopping there is no backoff, but no release either until
	// the member is quiet (releaseHeld) or the shutdown deadline passes
	// (expire).
	untilQuiet := x.holdsUntilQuiet()
	var d time.Duration
	if !x.stopping() {
		d = x.backoff(j, r.err)
	}
	if d <= 0 && !untilQuiet {
		x.finish(j, AckRelease, OutcomeRetried, r.err, r.took)
		return
	}
	// Hold the record, its lock renewed as needed, so the next delivery
	// does not come at once: a failing dependency would otherwise use up
	// the delivery limit in moments.
	j.state = jobHeld
	j.setOutcome(r.err, r.took)
	j.cancel(nil)
	if !untilQuiet {
		j.hold().releaseAt = x.now().Add(d)
		heap.Push(&x.holds, j)
		x.arm(j.releaseAt())
	}
}

// unavailableOf returns the dependency err reports down, if it is a
// retryable error that wraps a *handler.UnavailableError; nil
// otherwise. (A function of its own: the target of errors.As escapes,
// and result would allocate it for every job.)
func unavailableOf(err error) *handler.UnavailableError {
	if err == nil || handler.IsPermanent(err) {
		return nil
	}
	var ue *handler.UnavailableError
	if errors.As(err, &ue) {
		return ue
	}
	return nil
}

// lockGone reports whether j's record may no longer be this member's
// although its handler has just returned, and why: its lock ran out with
// no renewal answered, or the coordinator dropped the member from the
// group while the job ran (the broker then gives the member's records to
// others at once, well before their locks run out), as far as the member
// knows or can tell: it was fenced since the job started, or no heartbeat
// of its was answered for longer than the group's session timeout (a
// process frozen past its session learns that it was dropped only from
// the heartbeat after it wakes, and its handlers return first).
func (x *executor) lockGone(j *xjob, now time.Time) (bool, string) {
	if !j.deadline.After(now) {
		return true, fmt.Sprintf("it ran out %v before the handler returned", now.Sub(j.deadline).Round(time.Millisecond))
	}
	beat, fences := x.m.Standing()
	if fences != j.fences {
		return true, "the group's coordinator dropped this worker while the job ran"
	}
	if st := x.cfg.SessionTimeout; st > 0 && !beat.IsZero() && now.Sub(beat) > st {
		return true, fmt.Sprintf("no heartbeat answered for %v, longer than the group's session timeout of %v: the coordinator may have dropped this worker and given the record to another", now.Sub(beat).Round(time.Millisecond), st)
	}
	return false, ""
}

// doneWithoutLock ends j, whose handler returned done (nil, or a
// permanent error) after its record may have stopped being this
// member's (lockGone says why): the process was frozen (a SIGSTOP, a long
// GC or VM pause) or its member cut off. The broker may have made the
// record available again, perhaps to another member, so the job is not
// done as far as the queue goes, and is not reported so: the
// acknowledgement still goes (refused if the record is gone, and right if
// the lock was still held after all), and the job ends interrupted by
// ErrLockLost (a parked job keeps its Parked); its next delivery finds
// its claim, if it made one. The outcome is decided here, not on the
// broker's answer to that ack: Kafka answers an ack of an offset below
// the share-partition start offset with no error and ignores it
// (docs/architecture.md, fact 4), which is what a record another member
// has taken and accepted meanwhile becomes
// (TestFrozenWorkerWakesWithoutClaimingLostJobs on Kafka 4.4.0: the woken
// worker's ACCEPT of such a record is answered OK).
func (x *executor) doneWithoutLock(j *xjob, r xresult, why string) {
	ack, t := AckAccept, member.Accept
	if r.err != nil {
		ack, t = AckReject, member.Reject
	}
	x.m.Ack(j.key(), t)
	x.end(j, ErrLockLost)
	x.report(j, ack, OutcomeInterrupted, fmt.Errorf("%w: %s", ErrLockLost, why), r.took, r.parked)
}

// backoff returns how long to hold a job that failed with err, a
// retryable error, before releasing it: the delay the handler asked for
// (handler.RetryAfter), else the worker's RetryBackoff; none on its last
// delivery (the broker archives it either way) and never past MaxHold − 1 s
// from its start.
func (x *executor) backoff(j *xjob, err error) time.Duration {
	if j.last() {
		return 0
	}
	var d time.Duration
	var re *handler.RetryError
	switch f := x.cfg.RetryBackoff; {
	case errors.As(err, &re) && re.After > 0:
		d = re.After
	case f != nil:
		d = f(j.count) // the newest delivery's count
	}
	if limit := time.Until(j.start.Add(x.cfg.MaxHold)) - time.Second; d > limit {
		d = limit
	}
	return d
}

// abandon releases a job whose handler is still running and cancels its
// context with cause; whatever the handler returns later is discarded.
func (x *executor) abandon(j *xjob, cause error) {
	x.log.Warn("releasing a running job", "reason", cause, "record", j.key(),
		"running_for", time.Since(j.start).Round(time.Millisecond), "lock_left", time.Until(j.deadline).Round(time.Millisecond))
	x.finish(j, AckRelease, OutcomeInterrupted, cause, time.Since(j.start))
}

// finish sends j's terminal acknowledgement and reports it.
func (x *executor) finish(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration) {
	switch ack {
	case AckAccept:
		x.m.Ack(j.key(), member.Accept)
	case AckReject:
		x.m.Ack(j.key(), member.Reject)
	default:
		x.m.Ack(j.key(), member.Release)
	}
	x.end(j, err)
	x.report(j, ack, outcome, err, took, nil)
}

// drop ends j without an acknowledgement: its lock is gone (cause
// ErrLockLost) or the member stopped (ErrShutdown).
func (x *executor) drop(j *xjob, cause error) {
	var took time.Duration
	outcome := OutcomeInterrupted
	switch j.state {
	case jobRunning:
		took = time.Since(j.start)
	case jobHeld, jobPaused:
		took, outcome = j.took(), OutcomeRetried
	case jobWaiting, jobSnoozed, jobCopying, jobHalted:
		took = j.took()
	}
	x.end(j, cause)
	x.report(j, AckRelease, outcome, cause, took, nil)
}

// end takes j out of the executor and cancels its handler's context.
func (x *executor) end(j *xjob, cause error) {
	if j.young {
		x.dropYoung(j)
	} else if j.state != jobQueued || j.tracked {
		x.tracker.Remove(j)
	}
	x.leaveState(j)
	if p := x.pause; p != nil && p.probe == j {
		p.probe = nil
	}
	if j.cancel != nil {
		j.cancel(cause)
	}
	j.state = jobGone
	x.jobs.Delete(j.key())
	if ks := j.ks; ks != nil {
		ks.refs--
		if ks.probe == j {
			ks.probe = nil
		}
		now := x.now()
		if j.keyRunning {
			x.keyStopped(j, now)
		} else {
			x.keyFreed(ks, now)
		}
	}
}

// leaveState takes j out of the count of its state.
func (x *executor) leaveState(j *xjob) {
	switch j.state {
	case jobQueued:
		x.queued--
	case jobWaiting:
		x.waiting--
	case jobSnoozed:
		x.snoozed--
	case jobHalted:
		x.halted--
	}
}

// report counts and logs how j ended and tells the observer. A release on
// the last delivery is discarded whatever the cause: the broker archives
// the record.
func (x *executor) report(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration, parked *handler.DeadLetter) {
	final := ack != AckRelease || j.last()
	if ack == AckRelease && final {
		outcome = OutcomeDiscarded
	}
	x.outcomes[outcome]++
	x.logOutcome(j, ack, outcome, err, took, parked)
	if x.obs == nil {
		return
	}
	x.obs.JobFinished(&j.job, Result{Outcome: outcome, Ack: ack, Err: err, Parked: parked, Ran: j.ran, Duration: took, LockLeft: time.Until(j.deadline), Final: final})
}

// logOutcome logs one line per finished delivery: Debug for a success or
// a retry, Warn for a parked job, Error for a discarded one (it will not
// run again and is in no dead-letter topic). Interrupted jobs were logged
// at Warn where the worker gave them up; their line here is Debug. A
// cancelled job's line is Info: someone stopped it, and it did not run.
func (x *executor) logOutcome(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration, parked *handler.DeadLetter) {
	level, msg := slog.LevelDebug, "job finished"
	switch outcome {
	case OutcomeParked:
		level, msg = slog.LevelWarn, "job parked in its dead-letter topic"
	case OutcomeDiscarded:
		level, msg = slog.LevelError, "job discarded: it will not run again and was not parked (the dlq middleware parks such jobs)"
	case OutcomeRetried:
		msg = "job failed; released for a retry"
	case OutcomeInterrupted:
		msg = "job interrupted; released"
	case OutcomeCancelled:
		level, msg = slog.LevelInfo, "job cancelled; accepted without running"
	case OutcomeSnoozed:
		msg = "job snoozed; copied to run later and accepted"
	}
	ctx := context.Background()
	if !x.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("outcome", outcome.String()),
		slog.String("ack", ack.String()),
		slog.String("topic", j.job.Topic),
		slog.Int("partition", int(j.job.Partition)),
		slog.Int64("offset", j.job.Offset),
		slog.String("job_id", j.job.ID()),
		slog.Int("delivery", int(j.count)),
		slog.Duration("took", took),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if parked != nil {
		attrs = append(attrs, slog.String("reason", parked.Reason), slog.String("dlq_topic", parked.Topic),
			slog.Int("dlq_partition", int(parked.Partition)), slog.Int64("dlq_offset", parked.Offset))
	} else if r := handler.ReasonOf(err); r != "" {
		attrs = append(attrs, slog.String("reason", r))
	}
	x.log.LogAttrs(ctx, level, msg, attrs...)
}

// ackFailed reports an acknowledgement the broker did not apply.
func (x *executor) ackFailed(a member.AckResult) {
	if x.obs != nil {
		x.obs.AckFailed(a.Key.Topic, a.Key.Partition, a.Err)
	}
	x.ackWarnLeft++
	x.ackWarnLast = a.Err
	x.warnAcks(false)
}

// warnAcks logs the failed acknowledgements not logged yet, at most once
// per ackWarnEvery unless final.
func (x *executor) warnAcks(final bool) {
	if x.ackWarnLeft == 0 {
		return
	}
	now := x.now()
	if !final && now.Sub(x.ackWarnAt) < ackWarnEvery {
		return
	}
	x.log.Warn("broker rejected acknowledgements", "records", x.ackWarnLeft, "error", x.ackWarnLast)
	x.ackWarnAt, x.ackWarnLeft, x.ackWarnLast = now, 0, nil
}
