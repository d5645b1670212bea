package worker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/shareq/shareq/handler"
)

// The pause: a handler returned a [handler.UnavailableError], so a
// dependency every job needs is down. Releasing the job would spend a
// delivery on an attempt that cannot succeed (a Postgres failover of 20 s
// used to park healthy jobs at the delivery limit), so the executor holds
// it instead, its lock renewed, and stops taking work: it grants no
// credit (the member fetches nothing; records it already had credit for
// still arrive) and starts no queued record (their locks are renewed
// too). Every probe delay it runs one held job again as a probe (with
// none held, a queued record, or one record fetched for it); the first
// probe that does not report the dependency down ends the pause, every
// held job runs again on the same delivery, and fetching resumes. Jobs
// held past MaxHold are released as held retries are; a stop releases
// what the pause holds once the member is quiet.
//
// The pause is worker-wide, not per dependency: the worker cannot tell
// which dependency a record needs before its handler runs, its credit is
// one number for the member, and a dependency that every job needs (the
// kind handler.Unavailable is for) leaves nothing else to run. A second
// dependency that goes down while paused joins the pause; one probe that
// gets through ends it for all.
const (
	// probeFirst is the delay from the pause to the first probe; each
	// probe that finds the dependency still down doubles it, up to
	// probeMax, so an outage ends at most about probeMax before the
	// worker notices.
	probeFirst = 250 * time.Millisecond
	probeMax   = 2 * time.Second
)

// pause is a paused executor's state, owned by the run loop.
type pause struct {
	deps    []string      // the dependencies reported down, in order
	since   time.Time     // when the pause began
	delay   time.Duration // the current probe delay
	probeAt time.Time     // when the next probe may start
	probe   *xjob         // the job running as the probe; nil between probes
	held    []*xjob       // paused jobs, oldest first; entries no longer paused are skipped
	waited  int           // jobs that waited for the pause: held or queued (each once)
}

// pauseJob holds j, whose handler reported ue's dependency down, on its
// delivery, and pauses the executor unless it is paused already. probe
// says j ran as the probe.
func (x *executor) pauseJob(j *xjob, r xresult, ue *handler.UnavailableError, probe bool) {
	now := x.now()
	p := x.pause
	if p == nil {
		p = &pause{since: now, delay: probeFirst}
		p.probeAt = now.Add(p.delay)
		x.pause = p
		x.arm(p.probeAt)
		// Records waiting for a slot wait for the pause now: renew
		// their locks too.
		x.eachQueued(func(q *xjob) {
			if q.state == jobQueued {
				p.waited++
				x.track(q, now)
			}
		})
	}
	j.state = jobPaused
	j.setOutcome(r.err, r.took)
	j.cancel(nil)
	if probe {
		// Still down: back to the head of the line, and wait longer.
		p.held = append([]*xjob{j}, p.held...)
		p.delay = min(2*p.delay, probeMax)
		p.probeAt = now.Add(p.delay)
		x.arm(p.probeAt)
	} else {
		p.held = append(p.held, j)
		p.waited++
	}
	if !slices.Contains(p.deps, ue.Dependency) {
		p.deps = append(p.deps, ue.Dependency)
		x.publishDown()
		msg := "dependency down; the worker paused: jobs are held with their locks renewed and nothing is fetched until it is back"
		if len(p.deps) > 1 {
			msg = "another dependency down; the worker stays paused"
		}
		x.log.Warn(msg, "dependency", ue.Dependency, "error", r.err.Error(), "jobs_held", x.jobs.Len())
		if po, ok := x.obs.(PauseObserver); ok {
			po.WorkerPaused(ue.Dependency, r.err)
		}
		return
	}
	if x.log.Enabled(x.base, slog.LevelDebug) {
		x.log.Debug("job held: a dependency is down", "record", j.key(), "dependency", ue.Dependency, "probe", probe, "error", r.err.Error())
	}
}

// track has the tracker renew the lock of j, a queued record that waits
// for a pause or has waited long for a slot (keepQueuedLocks).
func (x *executor) track(j *xjob, now time.Time) {
	if j.tracked {
		return
	}
	j.tracked = true
	j.hold().heldSince = now
	x.tracker.Add(j, now, j.deadline, j.lock)
	x.armFor(j)
}

// maybeProbe starts the next probe when it is due and a slot is free: the
// oldest held job, else the oldest queued record, else (nothing in hand)
// one record fetched for it.
func (x *executor) maybeProbe() {
	p := x.pause
	if p == nil || p.probe != nil || x.stopping() || x.running >= x.conc || x.now().Before(p.probeAt) {
		return
	}
	for len(p.held) > 0 {
		j := p.held[0]
		p.held[0] = nil
		p.held = p.held[1:]
		if j.state == jobPaused && x.jobs.Get(j.key()) == j {
			if x.topicPaused(j.job.Topic) {
				x.halt(j, x.now()) // its topic's pause first
				continue
			}
			p.probe = j
			x.rerun(j)
			return
		}
	}
	for x.queued > 0 {
		j := x.popQueued()
		x.start(j)
		if j.state == jobRunning {
			p.probe = j
			return
		}
	}
	if x.outstanding < 1 { // credit for one record, past any debt
		x.m.Grant(1 - x.outstanding)
		x.outstanding = 1
	}
}

// resume ends the pause: a probe got through. Every held job runs again,
// oldest first, before queued records, and topUp grants credit again.
func (x *executor) resume() {
	p := x.pause
	x.pause = nil
	for _, j := range p.held {
		if j.state == jobPaused && x.jobs.Get(j.key()) == j {
			x.reruns = append(x.reruns, j)
		}
	}
	down := time.Since(p.since)
	x.log.Info("dependency back; the worker resumed", "dependency", strings.Join(p.deps, ","),
		"down_for", down.Round(time.Millisecond), "jobs_waited", p.waited)
	x.endPause(p, down, true)
}

// endPause tells the observer and the worker's state that p is over:
// back, or the executor stopped while paused.
func (x *executor) endPause(p *pause, down time.Duration, back bool) {
	x.pause = nil
	x.publishDown()
	if po, ok := x.obs.(PauseObserver); ok {
		for _, d := range p.deps {
			po.WorkerResumed(d, down, back)
		}
	}
}

// startReruns runs held jobs again after a pause, while slots are free.
func (x *executor) startReruns() {
	for x.running < x.conc && len(x.reruns) > 0 {
		j := x.reruns[0]
		x.reruns[0] = nil
		x.reruns = x.reruns[1:]
		switch {
		case j.state != jobPaused || x.jobs.Get(j.key()) != j:
		case x.topicPaused(j.job.Topic):
			x.halt(j, x.now())
		case x.admit(j, x.now(), false):
			x.rerun(j)
		}
	}
	if len(x.reruns) == 0 {
		x.reruns = nil
	}
}

// rerun runs a held job's handler again (after a pause, its key's
// breaker or its snooze), on the same delivery. Its lock
// is renewed all along and its MaxHold counts from its first start. The
// observer is not told it started again: it is the same job in hand.
func (x *executor) rerun(j *xjob) {
	j.ctx, j.cancel = context.WithCancelCause(x.baseFor(j))
	j.state = jobRunning
	j.setOutcome(nil, 0)
	j.job.DeliveryCount, j.job.LockDeadline = j.count, j.deadline
	x.launch(j)
}

// publishDown publishes the dependencies down for [Worker.DependenciesDown].
func (x *executor) publishDown() {
	if x.pause == nil || len(x.pause.deps) == 0 {
		x.cfg.DependenciesDown(nil)
		return
	}
	x.cfg.DependenciesDown(slices.Clone(x.pause.deps))
}
