package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shareq/shareq/internal/groupcfg"
)

// The worker-sigstop fault: a worker frozen, not dead (a long GC or VM
// pause, a container throttled to nothing). The driver SIGSTOPs a worker
// process with jobs in hand for longer than the record lock and the
// member's session timeout, so that the broker expires its locks, the
// coordinator drops it from the group and another worker takes its
// records over; then it SIGCONTs it and watches what the woken worker
// does: the jobs it had in hand must end as lost (their acks refused or
// never sent), never as done; a job another worker took over must run
// at most once more, its claim absorbing the second run; and the worker
// must rejoin the group (a new member epoch) and take work again.

// freezeMargin is added to the longer of the lock and the session
// timeout: the frozen worker's records are certainly redelivered, and its
// member certainly dropped, before it wakes.
const freezeMargin = 5 * time.Second

// sessionTimeout returns the share group's session timeout: the group's
// share.session.timeout.ms (the workers set it), else the broker's
// default.
func (p *phase) sessionTimeout(ctx context.Context) (time.Duration, error) {
	v, err := groupcfg.Describe(ctx, p.cl, p.group, groupcfg.SessionTimeoutMs)
	if err == nil && v[groupcfg.SessionTimeoutMs] != "" {
		if ms, err := strconv.Atoi(v[groupcfg.SessionTimeoutMs]); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond, nil
		}
	}
	bc, err := groupcfg.Broker(ctx, p.cl, groupcfg.BrokerSessionTimeoutMs)
	if err != nil {
		return 0, fmt.Errorf("describe the session timeout: %w", err)
	}
	ms, err := strconv.Atoi(bc[groupcfg.BrokerSessionTimeoutMs])
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("broker %s = %q", groupcfg.BrokerSessionTimeoutMs, bc[groupcfg.BrokerSessionTimeoutMs])
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// memberOf returns the group member whose client ID is proc's (the soak's
// workers connect with clientIDPrefix + their name), with its epoch; ok
// is false when the group does not list it.
func (p *phase) memberOf(ctx context.Context, proc string) (id string, epoch int32, ok bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := p.adm.DescribeShareGroups(cctx, p.group)
	if err != nil {
		return "", 0, false, err
	}
	g, found := gs[p.group]
	if !found {
		return "", 0, false, fmt.Errorf("group %s not described", p.group)
	}
	if g.Err != nil {
		return "", 0, false, g.Err
	}
	for _, m := range g.Members {
		if m.ClientID == clientIDPrefix+proc {
			return m.MemberID, m.MemberEpoch, true, nil
		}
	}
	return "", 0, false, nil
}

// memberWait bounds how long the worker-sigstop fault waits for its
// worker to be listed in the group before it freezes it.
const memberWait = 30 * time.Second

// awaitMember returns the member ID and epoch of proc's member once the
// group lists it, asking again every 250 ms (a describe that fails
// included) for up to within.
func (p *phase) awaitMember(ctx context.Context, proc string, within time.Duration) (string, int32, error) {
	deadline := time.Now().Add(within)
	for {
		id, epoch, listed, err := p.memberOf(ctx, proc)
		if err == nil && listed {
			return id, epoch, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not listed within %v", within)
			}
			return "", 0, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// procTally counts what one worker process reported after a moment.
type procTally struct {
	finishes map[string]int // "ack/why" of the jobs that had started before the freeze
	ackFails int
	started  int // jobs started after the wake-up
	firstJob time.Duration
}

// freezeWorker is the worker-sigstop fault.
func (p *phase) freezeWorker(ctx context.Context) (string, error) {
	session, err := p.sessionTimeout(ctx)
	if err != nil {
		return "", err
	}
	freeze := max(p.lock, session) + freezeMargin
	i, busy, err := p.pickWorker(ctx)
	if err != nil {
		return "", err
	}
	proc := p.fleet.running()[i]

	// Watch the process's events from the moment it wakes: the jobs it
	// had in hand end (as lost, not done), its refused acks, the jobs it
	// starts after rejoining.
	var (
		woke   time.Time
		tally  = procTally{finishes: map[string]int{}}
		inHand map[string]bool // its jobs in hand when it froze
	)
	p.ev.mu.Lock()
	p.ev.watch = func(from string, f []string) {
		if from != proc || len(f) < 3 || woke.IsZero() {
			return
		}
		switch f[1] {
		case "start":
			if tally.started == 0 {
				tally.firstJob = time.Since(woke)
			}
			tally.started++
		case "finish":
			if inHand[f[2]] && len(f) >= 5 {
				delete(inHand, f[2])
				tally.finishes[f[3]+"/"+f[4]]++
			}
		case "ackfail":
			tally.ackFails++
		}
	}
	p.ev.mu.Unlock()
	defer func() {
		p.ev.mu.Lock()
		p.ev.watch = nil
		p.ev.mu.Unlock()
	}()

	// Its member as the group lists it, found before the freeze: a
	// describe that times out (a broker just restarted, a loaded
	// machine) is asked again, and a worker still rejoining is waited
	// for, for up to memberWait.
	memberID, epoch, err := p.awaitMember(ctx, proc, memberWait)
	if err != nil {
		return "", fmt.Errorf("worker %s is not a member of the group before its freeze: %w", proc, err)
	}
	p.hit()
	pid, err := p.fleet.pause(i, syscall.SIGSTOP)
	if err != nil {
		return "", err
	}
	stopped := time.Now()
	// The coordinator drops the frozen member after the session timeout.
	var droppedAfter time.Duration
	for time.Since(stopped) < freeze && ctx.Err() == nil {
		if _, _, listed, err := p.memberOf(ctx, proc); err == nil && !listed && droppedAfter == 0 {
			droppedAfter = time.Since(stopped)
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.ev.mu.Lock()
	woke = time.Now()
	inHand = maps.Clone(p.ev.jobsIn[proc])
	frozenWith := len(inHand)
	p.ev.mu.Unlock()
	if _, err := p.fleet.pause(i, syscall.SIGCONT); err != nil {
		return "", err
	}
	frozeFor := time.Since(stopped)

	// It must rejoin (a new epoch; Kafka keeps its member ID) and take
	// work again, within a bounded time.
	var rejoined time.Duration
	var newEpoch int32
	deadline := time.Now().Add(30*time.Second + session)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, e, listed, err := p.memberOf(ctx, proc); err == nil && listed && (droppedAfter == 0 || rejoined == 0) {
			if e > 0 && (droppedAfter > 0 || e != epoch) {
				rejoined, newEpoch = time.Since(woke), e
			}
		}
		p.ev.mu.Lock()
		started, pending := tally.started, len(inHand)
		p.ev.mu.Unlock()
		if rejoined > 0 && pending == 0 && (started > 0 || p.lagZero(ctx)) {
			break // it took work, or there is none left to take
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.ev.mu.Lock()
	t := tally
	t.finishes = map[string]int{}
	for k, v := range tally.finishes {
		t.finishes[k] = v
	}
	pending := len(inHand)
	p.ev.mu.Unlock()

	var done []string
	for k, v := range t.finishes {
		if strings.HasSuffix(k, "/ok") {
			done = append(done, fmt.Sprintf("%s %d", k, v))
		}
	}
	desc := fmt.Sprintf("worker %s (pid %d, member %s epoch %d) SIGSTOPped for %v with %d jobs running (lock %v, session %v); dropped from the group after %v; after SIGCONT: the %d jobs it held ended %s, %d never ended, %d acks refused; rejoined after %v with epoch %d, first new job after %v",
		proc, pid, memberID, epoch, frozeFor.Round(100*time.Millisecond), busy, p.lock, session,
		droppedAfter.Round(100*time.Millisecond), frozenWith, fmtCounts(t.finishes), pending, t.ackFails,
		rejoined.Round(100*time.Millisecond), newEpoch, t.firstJob.Round(100*time.Millisecond))
	switch {
	case droppedAfter == 0:
		return desc, fmt.Errorf("the coordinator never dropped the frozen member: %s", desc)
	case rejoined == 0:
		return desc, fmt.Errorf("the woken worker did not rejoin the group: %s", desc)
	case t.started == 0 && !p.lagZero(ctx):
		return desc, fmt.Errorf("the woken worker took no new work while jobs waited: %s", desc)
	case t.started == 0:
		desc += " (none: every job was done)"
	case len(done) > 0:
		return desc, fmt.Errorf("the woken worker reported jobs it no longer held as done (%s): %s", strings.Join(done, ", "), desc)
	}
	return desc, nil
}

// frozenFlags switch the worker-sigstop, rolling-restart and
// postgres-outage-long faults: on by default in the full soak, off with
// -short unless given.
type frozenFlags struct {
	sigstop, rolling, pgOutageLong bool
	cluster3Workers                int
}

func (ff *frozenFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&ff.sigstop, "sigstop", true, "add a fault (both phases): SIGSTOP a worker with jobs in hand for longer than the lock and the session timeout, then SIGCONT it (off with -short unless given)")
	fs.BoolVar(&ff.rolling, "rolling-restart", true, "add a fault (3-node phase): restart every node in turn, each once the previous is back in every ISR")
	fs.IntVar(&ff.cluster3Workers, "cluster3-workers", 10, "worker processes in the 3-node phase (the rolling restart is to run under ten); 0: -workers")
	fs.BoolVar(&ff.pgOutageLong, "pg-outage-long", true, "add a fault (single-broker phase): Postgres down for twice the retry budget (off with -short unless given)")
}

// settle turns the faults off with -short, except those given explicitly.
func (ff *frozenFlags) settle(fs *flag.FlagSet, short bool) {
	if !short {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	ff.sigstop = ff.sigstop && set["sigstop"]
	ff.pgOutageLong = ff.pgOutageLong && set["pg-outage-long"]
}

// workersFor returns the worker processes of phase name.
func (ff *frozenFlags) workersFor(name string, workers int) int {
	if name == phaseCluster3 && ff.cluster3Workers > 0 {
		return ff.cluster3Workers
	}
	return workers
}

// frozenFaults are this file's and its siblings' faults for the phase.
func (p *phase) frozenFaults() []string {
	var out []string
	if p.o.frozen.sigstop {
		out = append(out, faultSigstop)
	}
	switch {
	case p.name == phaseCluster3 && p.o.frozen.rolling:
		out = append(out, faultRolling)
	case p.name != phaseCluster3 && p.o.frozen.pgOutageLong:
		out = append(out, faultPGOutageLong)
	}
	return out
}
