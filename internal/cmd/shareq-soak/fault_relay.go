package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/shareq/shareq/enqueue/pgoutbox"
)

// The relay faults (with the outbox path, relay.go). Both strike a relay
// while it holds a claimed batch: its Postgres session is idle in a
// transaction that has locked rows (it is producing them, or about to
// delete them), which the driver sees in pg_stat_activity.
//
//   - relay-sigkill: SIGKILL, and the relay's supervisor restarts it after
//     1 s. Postgres sees the connection close and rolls the claim back; the
//     other relay publishes the rows (again, if the broker had
//     acknowledged them: the worker's claim absorbs the second record).
//   - relay-sigstop: SIGSTOP for longer than anything the relay bounds
//     (relayFreeze: a round's ProduceTimeout plus pgoutbox's 30 s bound on
//     its Postgres work, and so its claim lease, ProduceTimeout +
//     pgoutbox.ClaimSlack), then SIGCONT. The lease must release the rows
//     to the other relay before the frozen one wakes; the woken relay
//     finds its session ended, its delete fails, and it goes on.
//
// Each measures how long the rows committed before the fault waited
// (until no row older than the fault's moment is left in the outbox: they
// were published) and the backlog's peak during the fault.

// relayRoundDB is pgoutbox's bound on the Postgres work of one round
// (its dbTimeout), which a round's context adds to the ProduceTimeout.
const relayRoundDB = 30 * time.Second

// relayFreeze is how long relay-sigstop freezes a relay: longer than a
// round may take, and so than the claim lease.
func (p *phase) relayFreeze() time.Duration {
	return p.o.relay.produceTimeout + relayRoundDB + freezeMargin
}

// relayFaults are the phase's relay faults.
func (p *phase) relayFaults() []string {
	if !p.outboxOn() {
		return nil
	}
	var out []string
	if p.o.relay.sigkill {
		out = append(out, faultRelaySigkill)
	}
	if p.o.relay.sigstop {
		out = append(out, faultRelaySigstop)
	}
	return out
}

// holding reports whether relay process proc's Postgres session is idle
// in a transaction that holds a transaction ID, that is rows it locked.
func (p *phase) holding(ctx context.Context, proc string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n int
	err := p.db.QueryRow(cctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'idle in transaction' AND backend_xid IS NOT NULL`,
		relayAppName(proc, p.schema)).Scan(&n)
	return n > 0, err
}

// strikeHolding waits (up to busyWait) for the relay in slot i to hold a
// claimed batch and stops it there with SIGSTOP; it tries again when the
// relay committed before the signal landed. It returns the process's
// name and pid, and the Postgres time just before the stop.
func (p *phase) strikeHolding(ctx context.Context, i int) (proc string, pid int, pgAt time.Time, tries int, err error) {
	f := p.outbox.fleet
	deadline := time.Now().Add(busyWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		proc = f.running()[i]
		if proc == "" {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if h, err := p.holding(ctx, proc); err != nil || !h {
			time.Sleep(time.Millisecond)
			continue
		}
		if err := p.db.QueryRow(ctx, "SELECT now()").Scan(&pgAt); err != nil {
			continue
		}
		tries++
		if pid, err = f.pause(i, syscall.SIGSTOP); err != nil {
			return "", 0, time.Time{}, tries, err
		}
		if h, err := p.holding(ctx, proc); err == nil && h {
			return proc, pid, pgAt, tries, nil
		}
		if _, err := f.pause(i, syscall.SIGCONT); err != nil {
			return "", 0, time.Time{}, tries, err
		}
	}
	return "", 0, time.Time{}, tries, fmt.Errorf("relay in slot %d never seen holding a claimed batch within %v (%d stops too late)", i, busyWait, tries)
}

// waitingSince returns the outbox rows committed at or before at, and
// the outbox's backlog.
func (p *phase) waitingSince(ctx context.Context, at time.Time) (int64, pgoutbox.Backlog, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n int64
	if err := p.db.QueryRow(cctx, "SELECT count(*) FROM "+pgoutbox.Table+" WHERE created_at <= $1", at).Scan(&n); err != nil {
		return 0, pgoutbox.Backlog{}, err
	}
	b, err := pgoutbox.ReadBacklog(cctx, p.db)
	return n, b, err
}

// relayWatch samples the outbox from a fault's moment: when the rows
// committed before it were all published, and the backlog's peak.
type relayWatch struct {
	at        time.Time // Postgres time of the fault
	start     time.Time // local time of the fault
	waiting   int64     // rows committed before the fault, at the fault
	clearedIn time.Duration
	maxRows   int64
	maxAge    time.Duration
}

func (w *relayWatch) sample(p *phase, ctx context.Context) {
	n, b, err := p.waitingSince(ctx, w.at)
	if err != nil {
		return
	}
	if w.waiting < 0 {
		w.waiting = n
	}
	w.maxRows, w.maxAge = max(w.maxRows, b.Rows), max(w.maxAge, b.OldestAge)
	if n == 0 && w.clearedIn == 0 {
		w.clearedIn = time.Since(w.start)
	}
}

func (w *relayWatch) String() string {
	cleared := "not yet"
	if w.clearedIn > 0 {
		cleared = fmt.Sprintf("after %v", w.clearedIn.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("the %d rows committed before it published %s; backlog peak %d rows, oldest %v",
		w.waiting, cleared, w.maxRows, w.maxAge.Round(100*time.Millisecond))
}

func (p *phase) relayStat(proc string) relayStats {
	p.outbox.mu.Lock()
	defer p.outbox.mu.Unlock()
	return p.outbox.stats[proc]
}

// otherProduced sums the produced counters of the relays other than proc.
func (p *phase) otherProduced(proc string) uint64 {
	p.outbox.mu.Lock()
	defer p.outbox.mu.Unlock()
	var n uint64
	for name, s := range p.outbox.stats {
		if name != proc {
			n += s.produced
		}
	}
	return n
}

// unstruck is the outcome of a relay fault that found no relay holding a
// batch: not a failure once every outbox job was committed and the
// outbox is empty (the faults before it outlasted the production; the
// report says it did not strike), else err.
func (p *phase) unstruck(ctx context.Context, err error) (string, error) {
	if int(p.outbox.committed.Load()) == len(p.outbox.jobs) && p.outboxEmpty(ctx) {
		return "NOT STRUCK: every outbox job was already committed and published", nil
	}
	return "", err
}

// relaySigkill is the relay-sigkill fault.
func (p *phase) relaySigkill(ctx context.Context) (string, error) {
	f := p.outbox.fleet
	i := p.rng.IntN(len(f.slots))
	proc, pid, pgAt, tries, err := p.strikeHolding(ctx, i)
	if err != nil {
		return p.unstruck(ctx, err)
	}
	w := &relayWatch{at: pgAt, start: time.Now(), waiting: -1}
	w.sample(p, ctx)
	othersBefore := p.otherProduced(proc)
	p.hit()
	_, exited, err := f.signal(i, syscall.SIGKILL, faultRelaySigkill)
	if err != nil {
		_, _ = f.pause(i, syscall.SIGCONT)
		return "", err
	}
	<-exited
	if w.waiting == 0 {
		return "", fmt.Errorf("relay %s killed holding a batch, but no row waited in the outbox", proc)
	}
	// Its supervisor restarts it after restartDelay; the rows must be
	// published meanwhile, or by it.
	var restarted time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil && (w.clearedIn == 0 || restarted == 0) {
		w.sample(p, ctx)
		if cur := f.running()[i]; restarted == 0 && cur != "" && cur != proc && !p.relayStat(cur).at.IsZero() {
			restarted = time.Since(w.start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	desc := fmt.Sprintf("relay %s (pid %d) SIGKILLed holding a claimed batch (stop %d); %s; the other relay published %d rows meanwhile; restarted, reporting again after %v",
		proc, pid, tries, w, p.otherProduced(proc)-othersBefore, restarted.Round(100*time.Millisecond))
	switch {
	case w.clearedIn == 0:
		return desc, fmt.Errorf("the killed relay's rows were not published within 30s: %s", desc)
	case restarted == 0:
		return desc, fmt.Errorf("the killed relay did not come back: %s", desc)
	}
	return desc, nil
}

// relaySigstop is the relay-sigstop fault.
func (p *phase) relaySigstop(ctx context.Context) (string, error) {
	f := p.outbox.fleet
	i := p.rng.IntN(len(f.slots))
	freeze, lease := p.relayFreeze(), p.relayLease()
	before := relayStats{}
	proc, pid, pgAt, tries, err := p.strikeHolding(ctx, i)
	if err != nil {
		return p.unstruck(ctx, err)
	}
	p.hit()
	before = p.relayStat(proc)
	w := &relayWatch{at: pgAt, start: time.Now(), waiting: -1}
	othersBefore := p.otherProduced(proc)
	var released time.Duration // when its session ended (the lease ran out)
	for time.Since(w.start) < freeze && ctx.Err() == nil {
		w.sample(p, ctx)
		if h, err := p.holding(ctx, proc); err == nil && !h && released == 0 {
			released = time.Since(w.start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	othersDuring := p.otherProduced(proc) - othersBefore
	frozeFor := time.Since(w.start)
	if _, err := f.pause(i, syscall.SIGCONT); err != nil {
		return "", err
	}
	woke := time.Now()
	// Woken, it must go on: rounds again, in the same process.
	var back time.Duration
	deadline := woke.Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if s := p.relayStat(proc); s.at.After(woke) && s.rounds > before.rounds {
			back = time.Since(woke)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := p.relayStat(proc)
	desc := fmt.Sprintf("relay %s (pid %d) SIGSTOPped holding a claimed batch (stop %d) for %v (claim lease %v); its session ended after %v; %s; the other relay published %d rows meanwhile; after SIGCONT its db errors %d -> %d, produced %d -> %d, rounds again after %v",
		proc, pid, tries, frozeFor.Round(100*time.Millisecond), lease, released.Round(100*time.Millisecond), w,
		othersDuring, before.dbErrors, after.dbErrors, before.produced, after.produced, back.Round(100*time.Millisecond))
	var errs []error
	if released == 0 {
		errs = append(errs, errors.New("the frozen relay's session kept its claim for the whole freeze"))
	}
	if w.clearedIn == 0 || w.clearedIn > lease+10*time.Second {
		errs = append(errs, fmt.Errorf("the rows committed before the freeze waited for more than the lease %v and 10s", lease))
	}
	if back == 0 {
		errs = append(errs, errors.New("the woken relay did not work again within 30s"))
	}
	if err := errors.Join(errs...); err != nil {
		return desc, fmt.Errorf("%w: %s", err, desc)
	}
	return desc, nil
}
