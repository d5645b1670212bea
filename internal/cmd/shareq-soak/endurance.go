package main

// The endurance mode (-duration D): the single-broker phase's workload
// (its jobs at -rate, 1% poison, 1% slow) produced for D, with its faults
// (three worker SIGKILLs, three SIGTERMs, a broker restart and a Postgres
// restart) drawn again in every enduranceCycle, and the sampler's series
// over the whole run. Worker w1 is never signalled (the steady worker):
// its one process lives the whole run, so its series shows a leak of
// goroutines, memory, descriptors or connections, whatever the faults do
// to the broker and Postgres under it. The others are killed and
// restarted, and their processes' series are short. The report gives the
// steady worker's slopes per hour, fitted by least squares over the
// samples after the first tenth of the run (the warm-up: pools and
// buffers filling); the phase's usual checks (0 lost, 0 double effects)
// hold as in any phase.

import (
	"fmt"
	"io"
	"strings"
	"time"
)

const (
	// enduranceCycle is how often the endurance mode draws the
	// single-broker phase's faults again.
	enduranceCycle = 5 * time.Minute
	// enduranceMargin is the time the endurance mode adds to -duration for
	// its phase's set-up, drain and checks.
	enduranceMargin = 10 * time.Minute
	// steadySlot is the worker slot no fault signals in the endurance mode.
	steadySlot = 0
)

// enduranceKinds are the faults of one endurance cycle: the full
// single-broker phase's.
var enduranceKinds = []string{faultSigkill, faultSigkill, faultSigkill, faultSigterm, faultSigterm, faultSigterm, faultBrokerRestart, faultPGRestart}

// enduranceSchedule draws enduranceKinds in every enduranceCycle of the
// window (between 10% and 80% of each cycle, as the phase draws them in
// its window), and the optional faults once per cycle too.
func (p *phase) enduranceSchedule(window time.Duration) []faultRecord {
	var out []faultRecord
	for c := time.Duration(0); c+enduranceCycle/2 <= window; c += enduranceCycle {
		span := min(enduranceCycle, window-c)
		kinds := enduranceKinds
		if p.o.webhookDownFor > 0 {
			kinds = append(kinds[:len(kinds):len(kinds)], faultWebhookDown)
		}
		var cycle []faultRecord
		for _, k := range kinds {
			at := c + time.Duration((0.1+0.7*p.rng.Float64())*float64(span))
			cycle = append(cycle, faultRecord{kind: k, at: at})
		}
		for i := 1; i < len(cycle); i++ {
			for j := i; j > 0 && cycle[j].at < cycle[j-1].at; j-- {
				cycle[j], cycle[j-1] = cycle[j-1], cycle[j]
			}
		}
		out = append(out, cycle...)
	}
	fmt.Printf("fault schedule (endurance, %d faults in %d cycles of %v; worker w%d is never signalled):", len(out), (window+enduranceCycle/2)/enduranceCycle, enduranceCycle, steadySlot+1)
	for _, f := range out {
		fmt.Printf(" %s@%.0fs", f.kind, f.at.Seconds())
	}
	fmt.Println()
	return out
}

// faultable returns the running worker slots a fault may signal: in the
// endurance mode all but the steady worker's (while another runs).
func (p *phase) faultable(running map[int]string) map[int]string {
	if p.o.ext.duration <= 0 || len(running) < 2 {
		return running
	}
	delete(running, steadySlot)
	return running
}

// enduranceSection is the endurance mode's part of the report.
type enduranceSection struct {
	duration time.Duration
	steady   []procStats // the steady worker's processes (one, unless it crashed)
	warmUp   time.Duration
	probs    []string
}

func (p *phase) enduranceSection(sec *samplerSection) *enduranceSection {
	out := &enduranceSection{duration: p.o.ext.duration}
	slot := fmt.Sprintf("w%d", steadySlot+1)
	var procs []string
	for _, name := range procNames(sec.samples) {
		if strings.HasPrefix(name, slot+".") {
			procs = append(procs, name)
		}
	}
	if len(procs) != 1 {
		out.probs = append(out.probs, fmt.Sprintf("endurance: the steady worker %s ran as %d processes, want 1 (it was never signalled)", slot, len(procs)))
	}
	for _, name := range procs {
		ss := series(sec.samples, name)
		if len(ss) < 3 {
			continue
		}
		span := ss[len(ss)-1].at - ss[0].at
		out.warmUp = span / 10
		warm := ss[0].at + out.warmUp
		var after []sample
		for _, s := range ss {
			if s.at >= warm {
				after = append(after, s)
			}
		}
		st := statsOf(after)
		st.span = span
		out.steady = append(out.steady, st)
		// Gross growth only: a series that grows over a short run by
		// noise (a restart's reconnects, a burst of jobs) stays in this.
		if st.last.goroutines > st.first.goroutines+max(20, st.first.goroutines/2) {
			out.probs = append(out.probs, fmt.Sprintf("endurance: %s goroutines grew from %d to %d after the warm-up", name, st.first.goroutines, st.last.goroutines))
		}
		if st.last.tcp > st.first.tcp+10 || st.last.fds > st.first.fds+10 {
			out.probs = append(out.probs, fmt.Sprintf("endurance: %s descriptors %d -> %d, TCP connections %d -> %d after the warm-up", name, st.first.fds, st.last.fds, st.first.tcp, st.last.tcp))
		}
	}
	return out
}

func (s *enduranceSection) printTo(w io.Writer) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	pf("endurance                %v of the single-broker workload and faults; the steady worker (never signalled), fitted after a warm-up of %v:", s.duration, s.warmUp.Round(time.Second))
	for _, st := range s.steady {
		pf("  %-8s %v      RSS %s -> %s (max %s, VmHWM %s), slope %+.1f MiB/h; Go heap in use %s -> %s, slope %+.1f MiB/h",
			st.proc, st.span.Round(time.Second), mib(st.first.rss), mib(st.last.rss), mib(st.peakRSS), mib(st.hwm), st.slope["rss_mib"],
			mib(st.first.heap), mib(st.last.heap), st.slope["heap_mib"])
		pf("  %-8s               goroutines %d -> %d (max %d), slope %+.1f/h; fds %d -> %d (max %d), slope %+.1f/h; tcp %d -> %d (max %d), slope %+.1f/h",
			"", st.first.goroutines, st.last.goroutines, st.maxGo, st.slope["goroutines"], st.first.fds, st.last.fds, st.maxFDs, st.slope["fds"], st.first.tcp, st.last.tcp, st.maxTCP, st.slope["tcp"])
		pf("  %-8s               heap profiles: status/%s.heap-early.pprof (at %v) and status/%s.heap.pprof (the newest, every %v): go tool pprof -diff_base ... shows what grew",
			"", st.proc, heapProfileAfter, st.proc, heapProfileEvery)
	}
	if len(s.probs) == 0 {
		pf("  endurance checks       hold (no gross growth after the warm-up; read the slopes)")
	} else {
		pf("  endurance checks       %s", strings.Join(s.probs, "; "))
	}
}

func (s *enduranceSection) problems() []string { return s.probs }
