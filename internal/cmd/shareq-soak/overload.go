package main

// The overload phase (-overload; in the full soak between the
// single-broker and the 3-node phase): jobs produced at several times the
// rate the workers were measured to run them at, until the group's lag
// stands for about -overload-backlog of the workers' work; then
// production stops and the lag must drain to 0. Every job is quick but
// takes -overload-job-time, and carries -overload-record-size bytes (a
// header, so handlers decode no more than usual) so that the workers'
// worker.MaxBytesInHand (-overload-bytes-in-hand), not their Concurrency,
// bounds the records they hold. What must hold, besides the phase's usual
// checks (0 lost, 0 double effects):
//
//   - each worker's peak resident set (VmHWM) within its warm one + 2 ×
//     (the bound + the member's decoded-batch cache, at most half the
//     bound) + overloadSlack: BENCHMARKS.md section 10's sizing (idle +
//     2 × (bound + cache) + what the handlers allocate), loosely. The
//     warm resident set, read after a calibration round that ran every
//     handler slot at once on the same records, stands for idle + what
//     the handlers and their Postgres connections take; the slack is for
//     what the formula leaves out (the share-fetch responses being read
//     and decoded while a backlog waits), which the report shows;
//   - the lag 0 at the end;
//   - no growth of goroutines, open descriptors or TCP connections from
//     the warm state (after a calibration round that ran every handler
//     slot) to the end of the phase.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const phaseOverload = "overload"

// overloadSlack is what the peak resident set may exceed warm + 2 ×
// (bound + cache) by.
const overloadSlack = 16 << 20

// padHeader is the header that carries an overload job's bulk.
const padHeader = "soak-pad"

// optionsExt are the flags of the overload phase and the endurance mode.
type optionsExt struct {
	overload      bool
	ovFactor      float64
	ovBacklog     time.Duration
	ovRecordSize  int
	ovBytesInHand int64
	ovJobTime     time.Duration
	ovConcurrency int
	ovWorkers     int
	duration      time.Duration // the endurance mode, when > 0
}

func registerExtFlags(fs *flag.FlagSet, e *optionsExt) {
	fs.BoolVar(&e.overload, "overload", false, "run only the overload phase (the full soak runs it after the single-broker phase): jobs at -overload-factor times the workers' measured rate, then the lag must drain")
	fs.Float64Var(&e.ovFactor, "overload-factor", 10, "overload phase: produce at this many times the workers' measured rate")
	fs.DurationVar(&e.ovBacklog, "overload-backlog", 90*time.Second, "overload phase: produce until the lag stands for about this much of the workers' work")
	fs.IntVar(&e.ovRecordSize, "overload-record-size", 64<<10, "overload phase: bytes of each job record (a header)")
	fs.Int64Var(&e.ovBytesInHand, "overload-bytes-in-hand", 4<<20, "overload phase: the workers' worker.MaxBytesInHand")
	fs.DurationVar(&e.ovJobTime, "overload-job-time", 4*time.Second, "overload phase: how long each job runs")
	fs.IntVar(&e.ovConcurrency, "overload-concurrency", 64, "overload phase: handlers per worker process (their Concurrency allows 2x this many records in hand; the bytes bound fewer)")
	fs.IntVar(&e.ovWorkers, "overload-workers", 2, "overload phase: worker processes (each holds Concurrency + 2 Postgres connections)")
	fs.DurationVar(&e.duration, "duration", 0, "endurance mode: run the single-broker phase's jobs and faults over and over for this long, with the sampler (see RELIABILITY.md)")
}

// applyExt checks the overload and endurance flags and applies the
// endurance mode to the phase's job count and time limit. It returns an
// exit code, 0 when the flags are fine.
func applyExt(o *options, fs *flag.FlagSet) int {
	e := &o.ext
	limitGiven := false
	fs.Visit(func(f *flag.Flag) { limitGiven = limitGiven || f.Name == "duration-limit" })
	switch {
	case e.ovFactor < 2:
		return usage("-overload-factor %v: want at least 2", e.ovFactor)
	case e.ovBacklog < 10*time.Second:
		return usage("-overload-backlog %v: want at least 10s", e.ovBacklog)
	case e.ovRecordSize < 1<<10 || e.ovRecordSize > 512<<10:
		return usage("-overload-record-size %d: want 1 KiB to 512 KiB", e.ovRecordSize)
	case e.ovBytesInHand < int64(e.ovRecordSize):
		return usage("-overload-bytes-in-hand %d: want at least one record (%d)", e.ovBytesInHand, e.ovRecordSize)
	case e.ovJobTime < 10*time.Millisecond:
		return usage("-overload-job-time %v: want at least 10ms", e.ovJobTime)
	case e.ovConcurrency < 1:
		return usage("-overload-concurrency %d: want at least 1", e.ovConcurrency)
	case e.ovWorkers < 2:
		return usage("-overload-workers %d: want at least 2", e.ovWorkers)
	case e.duration < 0:
		return usage("-duration %v: want more than 0", e.duration)
	case e.duration > 0 && (o.short || o.cluster3 || e.overload):
		return usage("-duration runs the single-broker phase: not with -short, -cluster3 or -overload")
	case e.duration > 0 && o.workers < 3:
		return usage("-duration with -workers %d: want at least 3 (w1 is never signalled, two others take the faults)", o.workers)
	case e.overload && (o.short || o.cluster3 || o.single):
		return usage("-overload runs only the overload phase: not with -short, -single or -cluster3")
	}
	if e.duration > 0 {
		o.single = true
		o.jobs = int(o.rate * e.duration.Seconds())
		if need := e.duration + enduranceMargin; !limitGiven || o.durationLimit < need {
			o.durationLimit = need
		}
	}
	return 0
}

// phaseOptions are the options of the phase: the overload phase's
// workers, handlers and jobs (no poison, no slow job) replace the soak's.
func (p *phase) phaseOptions() options {
	o := p.o
	if p.name == phaseOverload {
		o.workers, o.concurrency = o.ext.ovWorkers, o.ext.ovConcurrency
		o.poisonPct, o.slowPct = 0, 0
		o.jobs = 0 // planned by prepare, after the calibration
	}
	return o
}

// overloadRun is what the overload phase measured.
type overloadRun struct {
	calJobs     int
	calTook     time.Duration
	rate        float64 // the workers' measured rate, jobs/s
	prodRate    float64 // the rate jobs were produced at
	prodJobs    int
	prodFor     time.Duration
	bound       int64
	recordSize  int
	concurrency int
}

// prepare runs before the phase's production: for the overload phase, it
// waits for the workers to join, samples them idle, runs a calibration
// round that measures their rate, samples them warm, and plans the jobs
// to produce at -overload-factor times that rate. Other phases: nothing.
func (p *phase) prepare(ctx context.Context) error {
	if p.name != phaseOverload {
		return nil
	}
	e := p.o.ext
	ov := &overloadRun{bound: e.ovBytesInHand, recordSize: e.ovRecordSize, concurrency: e.ovConcurrency}
	pad := make([]byte, e.ovRecordSize)
	for i := range pad {
		pad[i] = 'a' + byte(p.rng.IntN(26))
	}
	p.ext.padding = []kgo.RecordHeader{{Key: padHeader, Value: pad}}

	if err := p.awaitMembers(ctx, p.o.workers); err != nil {
		return err
	}
	p.ext.smp.sampleNow(ctx, "idle")
	p.ev.note("overload: %d workers joined; idle sample taken", p.o.workers)

	// Calibration: three jobs per handler slot, all produced at once.
	ov.calJobs = 3 * p.o.workers * e.ovConcurrency
	p.jobs = p.overloadJobs(0, ov.calJobs)
	p.byID = map[string]*jobSpec{}
	for i := range p.jobs {
		p.byID[p.jobs[i].id] = &p.jobs[i]
	}
	p.ext.rate = 1e6
	calStart := time.Now()
	p.produce(ctx, calStart)
	if int(p.produced.Load()) != ov.calJobs {
		return fmt.Errorf("overload calibration: %d of %d jobs produced", p.produced.Load(), ov.calJobs)
	}
	first, last, err := p.awaitEffects(ctx, ov.calJobs)
	if err != nil {
		return fmt.Errorf("overload calibration: %w", err)
	}
	// Every slot ran three jobs: from the first effect (written as a job
	// starts) to the last, plus one job's time, is the round's makespan.
	ov.calTook = last.Sub(first) + e.ovJobTime
	ov.rate = float64(ov.calJobs) / ov.calTook.Seconds()
	if err := p.awaitLagZero(ctx); err != nil {
		return fmt.Errorf("overload calibration: %w", err)
	}
	p.ext.smp.sampleNow(ctx, "warm")

	ov.prodRate = e.ovFactor * ov.rate
	ov.prodFor = time.Duration(float64(e.ovBacklog) / (e.ovFactor - 1))
	ov.prodJobs = int(math.Ceil(ov.prodRate * ov.prodFor.Seconds()))
	p.jobs = append(p.jobs, p.overloadJobs(ov.calJobs, ov.prodJobs)...)
	p.byID = map[string]*jobSpec{}
	for i := range p.jobs {
		p.byID[p.jobs[i].id] = &p.jobs[i]
	}
	p.ext.produceFrom, p.ext.rate = ov.calJobs, ov.prodRate
	p.ext.ov = ov
	p.ev.note("overload: calibration ran %d jobs of %v in %v: the workers' rate is %.1f jobs/s; producing %d jobs of %d KiB at %.0f/s (%.0fx) for %v, a backlog of about %v of work",
		ov.calJobs, e.ovJobTime, ov.calTook.Round(100*time.Millisecond), ov.rate, ov.prodJobs, e.ovRecordSize>>10, ov.prodRate, e.ovFactor, ov.prodFor.Round(100*time.Millisecond), e.ovBacklog)
	return nil
}

// overloadJobs plans n quick jobs of -overload-job-time, numbered from
// from.
func (p *phase) overloadJobs(from, n int) []jobSpec {
	out := make([]jobSpec, n)
	for i := range out {
		out[i] = jobSpec{id: fmt.Sprintf("%s-%06d", p.runID, from+i), kind: kindQuick, ms: int(p.o.ext.ovJobTime.Milliseconds())}
	}
	return out
}

// awaitMembers waits (up to two minutes) until the broker lists n members
// in the share group.
func (p *phase) awaitMembers(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var got int
	for {
		if gs, err := p.adm.DescribeShareGroups(ctx, p.group); err == nil {
			if g, ok := gs[p.group]; ok && g.Err == nil {
				got = len(g.Members)
				if got >= n {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the share group has %d of %d members after two minutes", got, n)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awaitEffects waits (up to five minutes) until n jobs have their effect
// row, and returns the first and last effect's time.
func (p *phase) awaitEffects(ctx context.Context, n int) (first, last time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var got int
	for {
		err = p.db.QueryRow(ctx, "SELECT count(DISTINCT job_id), coalesce(min(at), now()), coalesce(max(at), now()) FROM soak_effects").Scan(&got, &first, &last)
		if err == nil && got >= n {
			return first, last, nil
		}
		select {
		case <-ctx.Done():
			return first, last, fmt.Errorf("%d of %d jobs ran within five minutes (last error: %v)", got, n, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// awaitLagZero waits (up to two minutes) until the broker reports nothing
// left to deliver.
func (p *phase) awaitLagZero(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for !p.lagZero(ctx) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group's lag is not 0 two minutes after every job ran")
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

// overloadSection is the overload phase's part of the report.
type overloadSection struct {
	ov     *overloadRun
	drain  time.Duration
	maxLag int64
	endLag int64
	procs  []overloadProc
	probs  []string
}

type overloadProc struct {
	proc                     string
	idle, hwm, limit         int64
	warm, end                sample
	goSlack, fdSlack, tcpMax int
}

// section checks the sampler's series against what the overload phase
// must show.
func (ov *overloadRun) section(p *phase, sec *samplerSection) *overloadSection {
	out := &overloadSection{ov: ov, drain: p.timings["drain"], maxLag: sec.maxLag, endLag: -1}
	bad := func(format string, args ...any) { out.probs = append(out.probs, fmt.Sprintf(format, args...)) }
	smp := p.ext.smp
	smp.mu.Lock()
	idleAt, okIdle := smp.marks["idle"]
	warmAt, okWarm := smp.marks["warm"]
	endAt, okEnd := smp.marks["end"]
	smp.mu.Unlock()
	if !okIdle || !okWarm || !okEnd {
		bad("overload: the sampler lacks its idle, warm or end sample")
		return out
	}
	for _, name := range procNames(sec.samples) {
		ss := series(sec.samples, name)
		idle, warm, end := at(ss, idleAt), at(ss, warmAt), at(ss, endAt)
		if idle.at != idleAt || end.at != endAt {
			bad("overload: worker %s did not run the whole phase (restarted?)", name)
			continue
		}
		st := statsOf(ss)
		op := overloadProc{proc: name, idle: idle.rss, hwm: st.hwm, warm: warm, end: end,
			limit: warm.rss + 2*(ov.bound+ov.bound/2) + overloadSlack}
		op.goSlack = max(10, warm.goroutines/10)
		op.fdSlack = 3
		out.procs = append(out.procs, op)
		out.endLag = end.lag
		if op.hwm > op.limit {
			bad("overload: worker %s peaked at %s (VmHWM), over warm %s + 2 x (bound %s + cache %s) + %s", name, mib(op.hwm), mib(warm.rss), mib(ov.bound), mib(ov.bound/2), mib(overloadSlack))
		}
		if end.goroutines > warm.goroutines+op.goSlack {
			bad("overload: worker %s goroutines grew from %d (warm) to %d (end)", name, warm.goroutines, end.goroutines)
		}
		if end.fds > warm.fds+op.fdSlack {
			bad("overload: worker %s open descriptors grew from %d (warm) to %d (end)", name, warm.fds, end.fds)
		}
		if end.tcp > warm.tcp+op.fdSlack {
			bad("overload: worker %s TCP connections grew from %d (warm) to %d (end)", name, warm.tcp, end.tcp)
		}
	}
	if out.endLag != 0 {
		bad("overload: the group's lag at the end is %d, want 0", out.endLag)
	}
	if out.maxLag < int64(ov.prodJobs)/4 {
		bad("overload: the lag peaked at %d records, under a quarter of the %d produced: the workers were not overloaded", out.maxLag, ov.prodJobs)
	}
	return out
}

func (s *overloadSection) printTo(w io.Writer) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	ov := s.ov
	pf("overload                 workers' measured rate %.1f jobs/s (calibration: %d jobs in %v); produced %d jobs of %d KiB at %.0f/s (%.1fx) for %v",
		ov.rate, ov.calJobs, ov.calTook.Round(100*time.Millisecond), ov.prodJobs, ov.recordSize>>10, ov.prodRate, ov.prodRate/ov.rate, ov.prodFor.Round(100*time.Millisecond))
	pf("  lag                    peaked at %d records (%s, %.0f s of the workers' work), %d at the end; drained %v after production stopped",
		s.maxLag, mib(s.maxLag*int64(ov.recordSize)), float64(s.maxLag)/ov.rate, s.endLag, s.drain.Round(time.Second))
	formula := 2 * (ov.bound + ov.bound/2)
	pf("  bound                  MaxBytesInHand %s (%d records), Concurrency %d (allows %d); asserted: VmHWM <= warm + 2 x (bound + cache %s) [= warm + %s] + %s",
		mib(ov.bound), ov.bound/int64(ov.recordSize), ov.concurrency, 2*ov.concurrency, mib(ov.bound/2), mib(formula), mib(overloadSlack))
	for _, op := range s.procs {
		pf("  %-8s               VmHWM %s: idle %s, warm %s, peak - warm %s (formula %s, %+.1f MiB off); limit %s",
			op.proc, mib(op.hwm), mib(op.idle), mib(op.warm.rss), mib(op.hwm-op.warm.rss), mib(formula), float64(op.hwm-op.warm.rss-formula)/(1<<20), mib(op.limit))
		pf("  %-8s               goroutines %d warm -> %d end, fds %d -> %d, tcp %d -> %d (kafka %d -> %d, postgres %d -> %d)",
			"", op.warm.goroutines, op.end.goroutines,
			op.warm.fds, op.end.fds, op.warm.tcp, op.end.tcp, op.warm.tcpKafka, op.end.tcpKafka, op.warm.tcpPG, op.end.tcpPG)
	}
	if len(s.probs) == 0 {
		pf("  overload checks        hold")
	} else {
		pf("  overload checks        %s", strings.Join(s.probs, "; "))
	}
}

func (s *overloadSection) problems() []string { return s.probs }
