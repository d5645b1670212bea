package main

// The limited-worker-kill fault: an operator lowers the job topic's rate
// for the group (as `shareq limit -rate` does, through package control) to
// half the production rate, a worker is SIGKILLed and restarted while the
// limit holds, and the limit is cleared. The workers run with a TopicRate
// of their own (soakCodeRate, far above the production rate) for the live
// limit to replace.
//
// The check: in no second of the limited span did the fleet start more
// jobs than the limit and a tenth (the bound worker.TopicRate gives: a
// second can touch one slot more than the limit, at its edges) and one
// (a start is timed as the worker reports it, a moment after its slot
// granted it, which can carry it into the next slot's second), and over
// the whole span no more than the limit allows and that second's extra —
// not before the kill, not while the killed worker's member lingered in
// the group, not after its restart joined. Every run counts (a poison
// job's, a duplicate the claim absorbs): the starts are the workers'
// start events, each with the time on its worker's clock (one machine:
// one clock). The end of the phase then checks, as for every fault, that
// every job ran exactly once.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/shareq/shareq/control"
)

const (
	// soakCodeRate is the TopicRate (jobs a second) the soak's workers
	// declare where the phase throws limited-worker-kill: above any
	// production rate, so it never binds, and a limit the live one
	// replaces.
	soakCodeRate = 1000
	// limitedFor is how long the lowered rate holds, counted from the
	// moment it took effect: the kill, the restart and the restarted
	// worker's join (a rate-limited worker starts jobs about 4 s after
	// it joins) fall within it.
	limitedFor = 20 * time.Second
)

// rateLimited says whether the phase's workers declare soakCodeRate and
// its schedule holds limited-worker-kill: the fault phases of one
// cluster, but not the endurance run (its own schedule) or overload (it
// measures throughput).
func (p *phase) rateLimited() bool {
	return p.name != phaseOverload && p.name != phaseCluster3 && p.o.ext.duration == 0
}

// liveLimit is the rate the fault lowers the topic to: half the
// production rate, so that jobs wait for it.
func (p *phase) liveLimit() int { return max(4, int(p.o.rate/2)) }

func (p *phase) limitedWorkerKill(ctx context.Context) (string, error) {
	p.waitBusy(ctx)
	cc, err := control.New(p.cl)
	if err != nil {
		return "", err
	}
	n := p.liveLimit()
	lim := control.Limit{Group: p.group, Topic: p.topic, Rate: &control.Rate{N: n, Per: time.Second},
		Reason: "soak: a lower rate over a worker kill", By: "shareq-soak"}
	if err := controlWrite(ctx, "set the rate of "+p.topic, func(ctx context.Context) error { return cc.SetLimit(ctx, lim) }); err != nil {
		return "", err
	}
	// The rate switches on every worker RateSwitch after it is written,
	// once each has read it (within a second).
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(control.RateSwitch + pauseWithin):
	}
	from := time.Now()
	var starts []time.Time
	p.ev.mu.Lock()
	p.ev.watch = func(_ string, f []string) {
		if len(f) < 5 || f[1] != "start" {
			return
		}
		if us, err := strconv.ParseInt(f[4], 10, 64); err == nil {
			starts = append(starts, time.UnixMicro(us))
		}
	}
	p.ev.mu.Unlock()
	defer func() {
		p.ev.mu.Lock()
		p.ev.watch = nil
		p.ev.mu.Unlock()
	}()
	kill, err := p.fault(ctx, faultSigkill)
	if err != nil {
		return "", err
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(time.Until(from.Add(limitedFor))):
	}
	to := time.Now()
	if err := controlWrite(ctx, "clear the rate of "+p.topic, func(ctx context.Context) error { return cc.ClearLimit(ctx, p.group, p.topic) }); err != nil {
		return "", err
	}
	p.ev.mu.Lock()
	starts = slices.DeleteFunc(starts, func(at time.Time) bool { return at.Before(from) || !at.Before(to) })
	slices.SortFunc(starts, time.Time.Compare)
	p.ev.mu.Unlock()
	most, at := busiestSecond(starts)
	bound := n + max(1, n/10) + 1
	if most > bound {
		return "", fmt.Errorf("under a rate of %d/s the fleet started %d jobs within 1 s from %s (at most %d: the limit, a tenth and one); %s",
			n, most, at.Format("15:04:05.000"), bound, kill)
	}
	span := to.Sub(from)
	if allowed := int(span.Seconds()*float64(n)) + bound - n; len(starts) > allowed {
		return "", fmt.Errorf("under a rate of %d/s the fleet started %d jobs in %v (at most %d); %s", n, len(starts), span.Round(time.Millisecond), allowed, kill)
	}
	if len(starts) < n {
		return "", fmt.Errorf("only %d jobs started in the %v under the rate of %d/s: the fault proved nothing (production ended?)", len(starts), span.Round(time.Second), n)
	}
	return fmt.Sprintf("rate lowered to %d/s for %v (production %v/s); %s; %d jobs started meanwhile (%.1f/s), at most %d in any second (bound %d)",
		n, span.Round(time.Second), p.o.rate, kill, len(starts), float64(len(starts))/span.Seconds(), most, bound), nil
}

// busiestSecond returns the most of the sorted times within any 1 s, and
// where that second begins.
func busiestSecond(at []time.Time) (int, time.Time) {
	most, j := 0, 0
	var from time.Time
	for i := range at {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		if i-j+1 > most {
			most, from = i-j+1, at[j]
		}
	}
	return most, from
}
