package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shareq/shareq/worker"
)

// The postgres-outage-long fault: Postgres down for twice the retry
// budget, the time in which a job failing on every delivery with the
// workers' default retry backoff (worker.ExponentialBackoff from
// RetryBackoffBaseDefault, +20% jitter) uses up its deliveries up to the
// one it is parked on. Before the pausing worker (issue 18) an outage
// that long parked healthy jobs; now every worker with jobs in hand must
// pause, hold them on their deliveries, park none, and resume once
// Postgres is back.

// retryBudget is the longest time the default retry backoff takes to use
// deliveries 1 to parkAt-1 (the jitter at its +20%).
func retryBudget(parkAt int) time.Duration {
	var d time.Duration
	step := worker.RetryBackoffBaseDefault
	for n := 1; n < parkAt; n++ {
		d += min(step, worker.RetryBackoffMaxDefault)
		step *= 2
	}
	return d * 12 / 10
}

// outageTally counts the workers' reports during the outage.
type outageTally struct {
	pauses, resumes int
	releases        map[string]int // "release/why" → count
}

// postgresOutageLong is the postgres-outage-long fault.
func (p *phase) postgresOutageLong(ctx context.Context) (string, error) {
	budget := retryBudget(p.parkAt())
	down := 2 * budget
	busy := p.waitBusy(ctx)
	before, err := p.countEffects(ctx)
	if err != nil {
		return "", fmt.Errorf("count effects before the outage: %w", err)
	}
	p.dlqMu.Lock()
	parkedBefore := p.healthyInDLQ()
	p.dlqMu.Unlock()

	t := outageTally{releases: map[string]int{}}
	p.ev.mu.Lock()
	p.ev.watch = func(_ string, f []string) {
		switch {
		case f[1] == "pause":
			t.pauses++
		case f[1] == "resume":
			t.resumes++
		case f[1] == "finish" && len(f) >= 5 && f[3] == "release":
			if j, ok := p.byID[f[2]]; ok && j.kind != kindPoison {
				t.releases[f[3]+"/"+f[4]]++
			}
		}
	}
	p.ev.mu.Unlock()
	defer func() {
		p.ev.mu.Lock()
		p.ev.watch = nil
		p.ev.mu.Unlock()
	}()

	p.hit()
	took, err := p.svc.restartPG(ctx, down)
	if err != nil {
		return "", err
	}
	// Wait for the pauses to end: each probe delay is at most 2 s.
	var after int64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		p.ev.mu.Lock()
		resumed := t.resumes >= t.pauses
		p.ev.mu.Unlock()
		if after, err = p.countEffects(ctx); err == nil && resumed {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("count effects after the outage: %w", err)
	}
	p.dlqMu.Lock()
	parkedAfter := p.healthyInDLQ()
	p.dlqMu.Unlock()
	p.ev.mu.Lock()
	tl := outageTally{pauses: t.pauses, resumes: t.resumes, releases: map[string]int{}}
	for k, v := range t.releases {
		tl.releases[k] = v
	}
	p.ev.mu.Unlock()

	desc := fmt.Sprintf("postgres down %v (twice the retry budget of %v to delivery %d) with %d jobs in hand: %d pauses, %d resumed; releases of healthy jobs meanwhile: %s; healthy jobs parked %d; effect rows %d before, %d after",
		took.Round(100*time.Millisecond), budget, p.parkAt(), busy, tl.pauses, tl.resumes, fmtCounts(tl.releases), parkedAfter-parkedBefore, before, after)
	switch {
	case after < before:
		return desc, fmt.Errorf("postgres lost data across the outage: %s", desc)
	case tl.pauses == 0:
		return desc, fmt.Errorf("no worker paused: %s", desc)
	case tl.resumes < tl.pauses:
		return desc, fmt.Errorf("not every pause ended: %s", desc)
	case parkedAfter > parkedBefore:
		return desc, fmt.Errorf("the outage parked healthy jobs: %s", desc)
	}
	return desc, nil
}

// healthyInDLQ counts the non-poison jobs the DLQ tail has seen; p.dlqMu
// is held.
func (p *phase) healthyInDLQ() int {
	n := 0
	for id := range p.dlqSeen {
		if j, ok := p.byID[id]; ok && j.kind != kindPoison {
			n++
		}
	}
	return n
}
