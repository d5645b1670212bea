package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Fault kinds.
const (
	faultSigkill       = "worker-sigkill"
	faultSigterm       = "worker-sigterm"
	faultBrokerRestart = "broker-restart"
	faultPGRestart     = "postgres-restart"
	faultLeaderStop    = "leader-stop"
	faultLeaderKill    = "leader-kill"
	faultKillParking   = "worker-sigkill-parking"
	faultWebhookDown   = "webhook-outage"
	faultPartitions    = "partitions-added"
	faultSigstop       = "worker-sigstop"
	faultRolling       = "rolling-restart"
	faultPGOutageLong  = "postgres-outage-long"
	faultRelaySigkill  = "relay-sigkill"
	faultRelaySigstop  = "relay-sigstop"
	// faultPausedBrokerRestart: the job topic paused, the broker SIGKILLed
	// and restarted, then resumed (fault_pause.go).
	faultPausedBrokerRestart = "paused-broker-restart"
	// faultLimitedKill: the topic's rate lowered live, a worker SIGKILLed
	// and restarted under it, the rate cleared (fault_limit.go).
	faultLimitedKill = "limited-worker-kill"
)

// faultRecord is one injected fault, for the report.
type faultRecord struct {
	kind   string
	at     time.Duration // since the phase's production started
	took   time.Duration
	detail string
	err    error
	// dupsBefore is the duplicates absorbed so far when a broker restart
	// began (the report's deliveries of done jobs per broker restart).
	dupsBefore int
}

// schedule draws the phase's faults and their moments within the
// production window.
func (p *phase) schedule(window time.Duration) []faultRecord {
	var kinds []string
	switch {
	case p.name == phaseOverload:
		return nil // overload alone (overload.go)
	case p.o.ext.duration > 0:
		return p.enduranceSchedule(window)
	case p.name == phaseCluster3:
		kinds = []string{faultSigkill, faultSigterm, faultLeaderStop, faultLeaderKill}
	case p.o.short:
		kinds = []string{faultSigkill, faultSigterm, faultBrokerRestart, faultPGRestart, faultPausedBrokerRestart}
	default:
		kinds = []string{faultSigkill, faultSigkill, faultSigkill, faultSigterm, faultSigterm, faultSigterm, faultBrokerRestart, faultPGRestart, faultPausedBrokerRestart}
	}
	if p.rateLimited() {
		kinds = append(kinds, faultLimitedKill)
	}
	if p.o.killParking {
		kinds = append(kinds, faultKillParking)
	}
	if p.o.webhookDownFor > 0 && p.name != phaseCluster3 {
		kinds = append(kinds, faultWebhookDown)
	}
	kinds = append(kinds, p.silentKinds()...)
	if p.o.partitionsAdded > 0 {
		kinds = append(kinds, faultPartitions)
	}
	kinds = append(kinds, p.frozenFaults()...)
	kinds = append(kinds, p.relayFaults()...)
	out := make([]faultRecord, len(kinds))
	for i, k := range kinds {
		// Between 10% and 80% of the window: the last faults still find
		// jobs arriving.
		at := time.Duration((0.1 + 0.7*p.rng.Float64()) * float64(window))
		switch k {
		case faultRelaySigkill, faultRelaySigstop:
			at /= 2 // early: the faults that run before it may take long, and it needs rows arriving
		case faultPausedBrokerRestart:
			at /= 4 // earlier still: it checks the jobs produced during its half minute
		}
		out[i] = faultRecord{kind: k, at: at}
	}
	// Sort by time (insertion sort: a handful of entries).
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].at < out[j-1].at; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	fmt.Print("fault schedule:")
	for _, f := range out {
		fmt.Printf(" %s@%.0fs", f.kind, f.at.Seconds())
	}
	fmt.Println()
	return out
}

// inject runs the fault schedule, one fault at a time: a fault whose
// moment passed while the previous one ran starts at once.
func (p *phase) inject(ctx context.Context, runStart time.Time, schedule []faultRecord) {
	for _, f := range schedule {
		if d := time.Until(runStart.Add(f.at)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		f.at = time.Since(runStart)
		p.hitAt = 0
		start := time.Now()
		p.ev.note("FAULT %s", f.kind)
		if f.kind == faultBrokerRestart || f.kind == faultPausedBrokerRestart {
			p.ev.mu.Lock()
			f.dupsBefore = sumMap(p.ev.dups)
			p.ev.mu.Unlock()
		}
		f.detail, f.err = p.fault(ctx, f.kind)
		f.took = time.Since(start)
		if p.hitAt > 0 {
			f.at = p.hitAt // when it struck, after waiting for work in hand
		}
		if f.err != nil {
			p.ev.note("FAULT %s failed after %v: %v", f.kind, f.took.Round(time.Millisecond), f.err)
			switch f.kind {
			case faultBrokerRestart, faultPausedBrokerRestart, faultPGRestart, faultLeaderStop, faultLeaderKill, faultRolling, faultPGOutageLong:
				// A service left in an unknown state: the rest of the
				// phase would measure that, not the workers.
				p.abort(fmt.Errorf("fault %s failed: %w", f.kind, f.err))
			}
		} else {
			p.ev.note("FAULT %s done in %v: %s", f.kind, f.took.Round(time.Millisecond), f.detail)
		}
		p.faultMu.Lock()
		p.faults = append(p.faults, f)
		p.faultMu.Unlock()
		if ctx.Err() != nil {
			return
		}
	}
}

func (p *phase) fault(ctx context.Context, kind string) (string, error) {
	switch kind {
	case faultSigkill, faultSigterm:
		i, busy, err := p.pickWorker(ctx)
		if err != nil {
			return "", err
		}
		sig, wait := syscall.SIGKILL, 10*time.Second
		if kind == faultSigterm {
			sig, wait = syscall.SIGTERM, workerShutdown+20*time.Second
		}
		p.hit()
		pid, exited, err := p.fleet.signal(i, sig, kind)
		if err != nil {
			return "", err
		}
		start := time.Now()
		select {
		case <-exited:
		case <-time.After(wait):
			return "", fmt.Errorf("worker %s (pid %d) still running %v after %v", p.fleet.slots[i].name, pid, wait, sig)
		}
		return fmt.Sprintf("worker %s (pid %d, %d jobs in hand) exited %v after %v; restarted after %v",
			p.fleet.slots[i].name, pid, busy, time.Since(start).Round(time.Millisecond), sig, restartDelay), nil

	case faultKillParking:
		return p.killParking(ctx)
	case faultSigstop:
		return p.freezeWorker(ctx)
	case faultRolling:
		return p.rollingRestart(ctx)
	case faultPGOutageLong:
		return p.postgresOutageLong(ctx)
	case faultRelaySigkill:
		return p.relaySigkill(ctx)
	case faultRelaySigstop:
		return p.relaySigstop(ctx)

	case faultSilentBroker, faultSilentPostgres:
		return p.silentFault(ctx, kind)
	case faultPartitions:
		return p.addPartitions(ctx)

	case faultWebhookDown:
		busy := p.waitBusy(ctx)
		p.hit()
		if err := os.WriteFile(p.webhookFlag(), nil, 0o644); err != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.o.webhookDownFor):
		}
		if err := os.Remove(p.webhookFlag()); err != nil {
			return "", err
		}
		return fmt.Sprintf("webhook down for %v with %d jobs in hand (handlers returned handler.Unavailable)", p.o.webhookDownFor, busy), nil

	case faultBrokerRestart:
		busy := p.waitBusy(ctx)
		p.hit()
		down, err := p.restartBroker(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("broker %s %s with %d jobs in hand, restarted on its data; unavailable %v", p.seeds[0], p.brokerStopped(), busy, down.Round(100*time.Millisecond)), nil
	case faultPausedBrokerRestart:
		return p.pausedBrokerRestart(ctx)
	case faultLimitedKill:
		return p.limitedWorkerKill(ctx)

	case faultPGRestart:
		busy := p.waitBusy(ctx)
		before, err := p.countEffects(ctx)
		if err != nil {
			return "", fmt.Errorf("count effects before the restart: %w", err)
		}
		p.hit()
		down, err := p.svc.restartPG(ctx, p.o.pgDownFor)
		if err != nil {
			return "", err
		}
		var after int64
		for range 20 {
			if after, err = p.countEffects(ctx); err == nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			return "", fmt.Errorf("count effects after the restart: %w", err)
		}
		if after < before {
			return "", fmt.Errorf("postgres lost data across the restart: %d effect rows before, %d after", before, after)
		}
		return fmt.Sprintf("postgres down+up in %v with %d jobs in hand; data kept (%d effect rows before, %d after)", down.Round(100*time.Millisecond), busy, before, after), nil

	case faultLeaderStop, faultLeaderKill:
		p.waitBusy(ctx)
		part, node, err := p.busiestLeader(ctx)
		if err != nil {
			return "", err
		}
		kill := kind == faultLeaderKill
		how := "SIGTERM (controlled shutdown)"
		if kill {
			how = "SIGKILL"
		}
		start := time.Now()
		p.hit()
		if err := p.svc.stopNode(ctx, p.kc, int(node), kill); err != nil {
			return "", err
		}
		newLeader := p.waitNewLeader(ctx, part, node, leaderDownFor)
		if d := time.Until(start.Add(leaderDownFor)); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if err := p.svc.startNode(ctx, p.kc, int(node)); err != nil {
			return "", err
		}
		return fmt.Sprintf("partition %d's leader, node %d, stopped by %s; %s; back after %v",
			part, node, how, newLeader, time.Since(start).Round(100*time.Millisecond)), nil
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// hit records the moment the fault in progress strikes.
func (p *phase) hit() { p.hitAt = time.Since(p.ev.start) }

// parkAt returns the delivery on which the workers park a failing job:
// the broker's limit, one less with -park-early. (With -spare-deliveries
// the group's limit is above it.)
func (p *phase) parkAt() int {
	if p.o.parkEarly {
		return p.limit - 1
	}
	return p.limit
}

// spare is the workers' worker.SpareDeliveries: the deliveries between
// the one they park on and the group's limit (0 unless a mitigation is
// on).
func (p *phase) spare() int {
	switch {
	case p.o.parkEarly:
		return 1
	case p.o.spareDeliveries > 0:
		return p.groupLimit - p.parkAt()
	}
	return 0
}

// workerGroupLimit is the -group-limit the workers get: the raised limit
// with -spare-deliveries, else 0, so the group keeps the broker's.
func (p *phase) workerGroupLimit() int {
	if p.o.spareDeliveries == 0 {
		return 0
	}
	return p.groupLimit
}

// killParking waits for a poison job to start the delivery on which it
// is to be parked, and SIGKILLs the worker running it.
func (p *phase) killParking(ctx context.Context) (string, error) {
	parking := p.parkAt()
	type hit struct{ proc, id string }
	hits := make(chan hit, 1)
	p.ev.mu.Lock()
	p.ev.onStart = func(proc, id, delivery string) {
		if j, ok := p.byID[id]; ok && j.kind == kindPoison && delivery == strconv.Itoa(parking) {
			select {
			case hits <- hit{proc, id}:
			default:
			}
		}
	}
	p.ev.mu.Unlock()
	defer func() {
		p.ev.mu.Lock()
		p.ev.onStart = nil
		p.ev.mu.Unlock()
	}()
	var h hit
	select {
	case h = <-hits:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(2 * time.Minute):
		return "", fmt.Errorf("no poison job started its delivery %d within 2m", parking)
	}
	i, ok := p.fleet.slotOf(h.proc)
	if !ok {
		return "", fmt.Errorf("process %s is gone", h.proc)
	}
	p.hit()
	pid, exited, err := p.fleet.signal(i, syscall.SIGKILL, faultKillParking)
	if err != nil {
		return "", err
	}
	<-exited
	p.killedParking = h.id
	return fmt.Sprintf("worker %s (pid %d) SIGKILLed while running poison job %s's delivery %d, the one it parks on", h.proc, pid, h.id, parking), nil
}

// busyWait bounds how long a fault waits for the workers to be busy.
const busyWait = 10 * time.Second

// waitBusy waits (up to busyWait) until handlers are running and jobs are
// finishing, so that the fault hits work in progress; it returns how many
// handlers are running.
func (p *phase) waitBusy(ctx context.Context) int {
	deadline := time.Now().Add(busyWait)
	for {
		n, since := p.ev.busy("")
		if (n > 0 && since < time.Second) || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pickWorker chooses the worker process to signal: a random one among
// those with the most jobs in hand (running, or held in retry backoff), waiting (up to busyWait) for one
// to have a quick job running besides any slow ones.
func (p *phase) pickWorker(ctx context.Context) (int, int, error) {
	deadline := time.Now().Add(busyWait)
	for {
		running := p.faultable(p.fleet.running())
		if len(running) == 0 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return 0, 0, errors.New("no worker process running")
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		best, most := []int(nil), -1
		for _, i := range slices.Sorted(maps.Keys(running)) {
			n, _ := p.ev.busy(running[i])
			switch {
			case n > most:
				best, most = []int{i}, n
			case n == most:
				best = append(best, i)
			}
		}
		if most >= 2 || time.Now().After(deadline) || ctx.Err() != nil {
			return best[p.rng.IntN(len(best))], most, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busiestLeader returns the partition of the job topic with the most
// records not yet acknowledged by the group, and its leader.
func (p *phase) busiestLeader(ctx context.Context) (int32, int32, error) {
	best, bestLag := int32(0), int64(-1)
	if offs, err := p.adm.DescribeShareGroupOffsets(ctx, p.group); err == nil {
		if g, ok := offs[p.group]; ok {
			g.Offsets.Each(func(o kadm.ShareOffset) {
				if o.Topic == p.topic && o.Err == nil && o.Lag > bestLag {
					best, bestLag = o.Partition, o.Lag
				}
			})
		}
	}
	md, err := p.adm.Metadata(ctx, p.topic)
	if err != nil {
		return 0, 0, err
	}
	pd, ok := md.Topics[p.topic].Partitions[best]
	if !ok || pd.Leader < 0 {
		return 0, 0, fmt.Errorf("partition %d of %s has no leader", best, p.topic)
	}
	return best, pd.Leader, nil
}

// waitNewLeader waits (up to max) for partition part to get a leader other
// than old, and describes the outcome.
func (p *phase) waitNewLeader(ctx context.Context, part, old int32, max time.Duration) string {
	start := time.Now()
	for time.Since(start) < max && ctx.Err() == nil {
		mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		md, err := p.adm.Metadata(mctx, p.topic)
		cancel()
		if err == nil {
			if pd, ok := md.Topics[p.topic].Partitions[part]; ok && pd.Leader >= 0 && pd.Leader != old {
				return fmt.Sprintf("node %d led it %v later (ISR %v)", pd.Leader, time.Since(start).Round(100*time.Millisecond), pd.ISR)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Sprintf("no new leader seen within %v", max)
}

// webhookFlag is the file whose presence makes the workers' "webhook" down
// (the webhook-outage fault).
func (p *phase) webhookFlag() string { return filepath.Join(p.logDir, "webhook-down") }
