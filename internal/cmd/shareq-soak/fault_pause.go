package main

// The paused-broker-restart fault: an operator pauses the job topic (as
// `shareq pause` does, through package control), the broker is SIGKILLed
// and restarted on its data while the topic is paused, then a worker is
// SIGKILLed and restarted, and the topic is resumed once the workers are
// back on the broker and the restarted one has run a while. The pause
// lives in the control topic (replicated, compacted) and in each worker's
// last state, the member's paused topics outlive its share sessions, and
// a worker reads the control topic before its first fetch; this fault is
// what shows that together they hold across a broker crash and a worker
// crash: the killed worker's records, back in the group once its session
// times out, wait for the resume too.
//
// The check: no job handed to the producer after the pause took effect
// (control's promise: on every worker within a second) runs before the
// resume. Jobs already in hand at the pause may still be running when it
// takes effect (a pause lets running jobs finish), so only the jobs
// produced while paused are counted; the end of the phase then checks, as
// for every fault, that each of them ran exactly once after the resume.

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/shareq/shareq/control"
)

const (
	// pauseWithin is how soon a pause is in effect on every worker: the
	// bound docs/operating.md gives (measured p99 in milliseconds).
	pauseWithin = time.Second
	// pausedAfterBack is how long the topic stays paused after the worker
	// killed once the broker is back: long enough for every worker to have
	// reconnected, the killed one to have restarted (after restartDelay)
	// and joined, and all to have fetched many times (a fetch waits at most
	// its MaxWait, well under a second).
	pausedAfterBack = 10 * time.Second
	// pausedJobsAfterBack is how many jobs the producer must have handed
	// on after the broker is back before the resume, so that the workers
	// had records of the paused topic to acquire had they wanted to.
	pausedJobsAfterBack = 20
	// pauseObserveMax bounds the wait for those jobs.
	pauseObserveMax = time.Minute
)

// restartBroker SIGKILLs the phase's broker (node 1 of its cluster, or the
// single test broker; SIGTERM with -broker-sigterm) and starts it again on
// its data; it returns how long the broker was unavailable.
func (p *phase) restartBroker(ctx context.Context) (time.Duration, error) {
	if p.kc == nil {
		return p.svc.restartTestBroker(ctx, p.seeds[0], p.brokerSignal())
	}
	start := time.Now()
	err := p.svc.stopNode(ctx, p.kc, 1, p.brokerSignal() == syscall.SIGKILL)
	if err == nil {
		err = p.svc.startNode(ctx, p.kc, 1)
	}
	return time.Since(start), err
}

// brokerSignal is how the broker-restart faults stop the broker.
func (p *phase) brokerSignal() syscall.Signal {
	if p.o.brokerTerm {
		return syscall.SIGTERM
	}
	return syscall.SIGKILL
}

// brokerStopped says how the broker was stopped, for the fault lines.
func (p *phase) brokerStopped() string {
	if p.o.brokerTerm {
		return "stopped (SIGTERM)"
	}
	return "SIGKILLed"
}

func (p *phase) pausedBrokerRestart(ctx context.Context) (string, error) {
	busy := p.waitBusy(ctx)
	cc, err := control.New(p.cl)
	if err != nil {
		return "", err
	}
	if err := cc.Pause(ctx, control.Pause{Group: p.group, Topic: p.topic, Reason: "soak: paused over a broker restart", By: "shareq-soak"}); err != nil {
		return "", fmt.Errorf("pause %s: %w", p.topic, err)
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(pauseWithin):
	}
	first := int(p.handed.Load()) + 1 // handed on after the pause took effect
	p.hit()
	down, err := p.restartBroker(ctx)
	if err != nil {
		return "", err
	}
	back := time.Now()
	kill, err := p.fault(ctx, faultSigkill)
	if err != nil {
		return "", fmt.Errorf("while paused: %w", err)
	}
	killed := time.Now()
	for time.Since(killed) < pausedAfterBack || int(p.handed.Load()) < first+pausedJobsAfterBack {
		if time.Since(back) > pauseObserveMax || int(p.handed.Load()) == len(p.jobs)-1 {
			break // production ended: what was produced while paused is checked
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	resumed := time.Now()
	if err := controlWrite(ctx, "resume "+p.topic, func(ctx context.Context) error { return cc.Resume(ctx, p.group, p.topic) }); err != nil {
		return "", err
	}
	last := int(p.handed.Load())
	if last < first {
		return "", errors.New("no job was produced while the topic was paused: the fault proved nothing (it came after the production window)")
	}
	ids := make([]string, 0, last-first+1)
	for _, j := range p.jobs[first : last+1] {
		ids = append(ids, j.id)
	}
	var ran int
	var example string
	err = p.db.QueryRow(ctx, `SELECT count(*), coalesce(min(job_id), '') FROM soak_effects WHERE at < $1 AND job_id = ANY($2)`, resumed, ids).Scan(&ran, &example)
	if err != nil {
		return "", fmt.Errorf("count the jobs that ran while paused: %w", err)
	}
	if ran > 0 {
		return "", fmt.Errorf("%d of the %d jobs produced while %s was paused ran before the resume (e.g. %s)", ran, len(ids), p.topic, example)
	}
	return fmt.Sprintf("topic paused with %d jobs in hand, broker %s %s %v later and restarted on its data (unavailable %v); then %s; %d jobs produced while paused, none ran before the resume %v after the broker was back",
		busy, p.seeds[0], p.brokerStopped(), pauseWithin, down.Round(100*time.Millisecond), kill, len(ids), resumed.Sub(back).Round(100*time.Millisecond)), nil
}

// controlWrite runs write (a write to the control topic), retrying while
// the broker that was just restarted still refuses writes (its
// partitions' leadership settling); what names it in the error.
func controlWrite(ctx context.Context, what string, write func(context.Context) error) error {
	var err error
	for range 20 {
		if err = write(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}
