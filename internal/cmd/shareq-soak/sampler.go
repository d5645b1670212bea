package main

// The sampler: every few seconds, for every worker process of a phase, its
// resident set (VmRSS and VmHWM from /proc/<pid>/status), its goroutines
// and heap (written by the worker itself to a status file, see
// writeStatus), its open file descriptors (/proc/<pid>/fd) and its
// established TCP connections (its socket descriptors matched against
// /proc/<pid>/net/tcp and tcp6), with the share group's lag (the sum over
// the job topic's partitions of what DescribeShareGroupOffsets reports).
// The series goes to samples.csv in the phase's log directory and is drawn
// into samples.png; the report summarises it.

import (
	"bufio"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/procstat"
)

// sampleEvery is how often the driver samples the worker processes, and
// statusEvery how often a worker writes its status file.
const (
	sampleEvery = 3 * time.Second
	statusEvery = time.Second
)

// The worker process's flags that the sampler and the overload phase add
// (registered by registerSamplerFlags, so that worker.go keeps its own).
var workerExtra struct {
	statusDir      string
	maxBytesInHand int64
}

func registerSamplerFlags(fs *flag.FlagSet) {
	fs.StringVar(&workerExtra.statusDir, "status-dir", "", "write NAME.status (goroutines, heap) into this directory every second, for the driver's sampler")
	fs.Int64Var(&workerExtra.maxBytesInHand, "max-bytes-in-hand", 0, "worker.MaxBytesInHand (0: the default)")
}

// writeStatus writes the worker's goroutine count and heap to
// statusDir/name.status every statusEvery until ctx ends. A write goes to
// a temporary file renamed over the last, so the driver never reads half
// of one.
func writeStatus(ctx context.Context, name string) {
	if workerExtra.statusDir == "" {
		return
	}
	path := filepath.Join(workerExtra.statusDir, name+".status")
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	start := time.Now()
	var profiled time.Time // when the last heap profile was written
	for {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		line := fmt.Sprintf("goroutines %d heap_inuse %d sys %d gc %d\n", runtime.NumGoroutine(), ms.HeapInuse, ms.Sys, ms.NumGC)
		if err := os.WriteFile(path+".tmp", []byte(line), 0o644); err == nil {
			_ = os.Rename(path+".tmp", path)
		}
		// Heap profiles, to tell what a rising heap holds: one once the
		// pools have filled (NAME.heap-early.pprof) and the newest every
		// heapProfileEvery after it (NAME.heap.pprof); compare them with
		// go tool pprof -diff_base NAME.heap-early.pprof NAME.heap.pprof.
		switch now := time.Now(); {
		case profiled.IsZero() && now.Sub(start) >= heapProfileAfter:
			writeHeapProfile(filepath.Join(workerExtra.statusDir, name+".heap-early.pprof"))
			profiled = now
		case !profiled.IsZero() && now.Sub(profiled) >= heapProfileEvery:
			writeHeapProfile(filepath.Join(workerExtra.statusDir, name+".heap.pprof"))
			profiled = now
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// addPort adds the port of addr (host:port) to ports; before run only.
func (s *sampler) addPort(ports map[int]bool, addr string) {
	if _, port, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(port); err == nil {
			ports[n] = true
		}
	}
}

// When a worker writes its heap profiles (writeStatus).
const (
	heapProfileAfter = 2 * time.Minute
	heapProfileEvery = 5 * time.Minute
)

// writeHeapProfile writes the heap profile of the process to path, by a
// temporary file renamed over it.
func writeHeapProfile(path string) {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return
	}
	err = pprof.Lookup("heap").WriteTo(f, 0)
	if cerr := f.Close(); err == nil && cerr == nil {
		_ = os.Rename(path+".tmp", path)
	}
}

// readStatus reads a status file written by writeStatus.
func readStatus(path string) (goroutines int, heap int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	for i := 0; i+1 < len(f); i += 2 {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %s %q: %w", path, f[i], f[i+1], err)
		}
		switch f[i] {
		case "goroutines":
			goroutines = int(v)
		case "heap_inuse":
			heap = v
		}
	}
	if goroutines == 0 {
		return 0, 0, fmt.Errorf("%s: no goroutine count", path)
	}
	return goroutines, heap, nil
}

// procSockets returns how many file descriptors a process has open and
// the inodes of those that are sockets.
func procSockets(pid int) (fds int, sockets map[uint64]bool, err error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	sockets = map[uint64]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 64); err == nil {
				sockets[n] = true
			}
		}
	}
	return len(ents), sockets, nil
}

// tcpEstablished returns the remote ports of the established TCP
// connections, among /proc/<pid>/net/tcp and tcp6, whose socket inode is
// in sockets: the process's own connections (the tables list the whole
// network namespace's).
func tcpEstablished(pid int, sockets map[uint64]bool) ([]int, error) {
	var ports []int
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			return nil, err
		}
		ps, err := parseNetTCP(f, sockets)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/net/%s: %w", pid, name, err)
		}
		ports = append(ports, ps...)
	}
	return ports, nil
}

// parseNetTCP reads a /proc/net/tcp table: the remote ports of the
// ESTABLISHED rows (state 01) whose inode is in sockets.
func parseNetTCP(r io.Reader, sockets map[uint64]bool) ([]int, error) {
	var ports []int
	sc := bufio.NewScanner(r)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "01" {
			continue
		}
		ino, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || !sockets[ino] {
			continue
		}
		_, hexPort, ok := strings.Cut(f[2], ":")
		if !ok {
			return nil, fmt.Errorf("remote address %q", f[2])
		}
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("remote port %q: %w", hexPort, err)
		}
		ports = append(ports, int(port))
	}
	return ports, sc.Err()
}

// sample is one reading of one worker process; lag is the group's at that
// moment (-1: not known).
type sample struct {
	at         time.Duration // since the phase's sampler started
	slot, proc string
	pid        int
	rss, hwm   int64
	goroutines int // -1: no status file yet
	heap       int64
	fds        int
	tcp        int // established TCP connections
	tcpKafka   int // of tcp, to a broker's port
	tcpPG      int // of tcp, to Postgres's port
	lag        int64
}

var sampleHeader = []string{"t_s", "slot", "proc", "pid", "rss_mib", "hwm_mib", "goroutines", "heap_inuse_mib", "fds", "tcp", "tcp_kafka", "tcp_pg", "group_lag"}

func (s sample) record() []string {
	mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 2, 64) }
	return []string{
		strconv.FormatFloat(s.at.Seconds(), 'f', 1, 64), s.slot, s.proc, strconv.Itoa(s.pid),
		mib(s.rss), mib(s.hwm), strconv.Itoa(s.goroutines), mib(s.heap),
		strconv.Itoa(s.fds), strconv.Itoa(s.tcp), strconv.Itoa(s.tcpKafka), strconv.Itoa(s.tcpPG),
		strconv.FormatInt(s.lag, 10),
	}
}

// procRef names a running worker process.
type procRef struct {
	slot, proc string
	pid        int
}

// procs returns the worker processes running now.
func (f *fleet) procs() []procRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []procRef
	for _, s := range f.slots {
		if s.exited == nil || s.cmd == nil || s.cmd.Process == nil {
			continue
		}
		select {
		case <-s.exited:
		default:
			out = append(out, procRef{slot: s.name, proc: s.cur, pid: s.cmd.Process.Pid})
		}
	}
	return out
}

// sampler samples a phase's worker processes every sampleEvery.
type sampler struct {
	p         *phase
	start     time.Time
	statusDir string
	// The remote ports of a worker's connections to the broker(s) and
	// to Postgres: theirs, and the slots' proxies' (routeSilent).
	kafkaPorts map[int]bool
	pgPorts    map[int]bool

	mu      sync.Mutex
	samples []sample
	marks   map[string]time.Duration // named moments ("idle", "warm", "end")
	csv     *csv.Writer
	csvFile *os.File
	errs    int // readings that failed (a process that exited meanwhile)

	stop     context.CancelFunc
	done     chan struct{}
	finished sync.Once
}

// newSampler makes the phase's sampler; start starts it.
func (p *phase) newSampler() (*sampler, error) {
	s := &sampler{p: p, start: time.Now(), statusDir: filepath.Join(p.logDir, "status"), kafkaPorts: map[int]bool{}, pgPorts: map[int]bool{}, marks: map[string]time.Duration{}}
	if err := os.MkdirAll(s.statusDir, 0o755); err != nil {
		return nil, err
	}
	for _, b := range p.seeds {
		s.addPort(s.kafkaPorts, b)
	}
	if u, err := url.Parse(p.pgURL); err == nil {
		if u.Port() == "" {
			s.pgPorts[5432] = true
		} else {
			s.addPort(s.pgPorts, u.Host)
		}
	}
	f, err := os.Create(filepath.Join(p.logDir, "samples.csv"))
	if err != nil {
		return nil, err
	}
	s.csvFile, s.csv = f, csv.NewWriter(f)
	_ = s.csv.Write(sampleHeader)
	return s, nil
}

// run samples every sampleEvery until ctx ends.
func (s *sampler) run(ctx context.Context) {
	ctx, s.stop = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			s.sampleNow(ctx, "")
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// finish takes a last sample marked "end", stops the sampler, writes the
// CSV and draws the chart.
func (s *sampler) finish(ctx context.Context) {
	s.finished.Do(func() { s.doFinish(ctx) })
}

func (s *sampler) doFinish(ctx context.Context) {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	s.sampleNow(ctx, "end")
	s.mu.Lock()
	s.csv.Flush()
	err := s.csv.Error()
	s.csvFile.Close()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	if err != nil {
		s.p.ev.note("sampler: samples.csv: %v", err)
	}
	if err := drawSamples(filepath.Join(s.p.logDir, "samples.png"), s.p.name, samples); err != nil {
		s.p.ev.note("sampler: samples.png: %v", err)
	}
}

// sampleNow reads every running worker process once; mark, if not "",
// names the moment.
func (s *sampler) sampleNow(ctx context.Context, mark string) {
	lag := s.groupLag(ctx)
	at := time.Since(s.start)
	var got []sample
	errs := 0
	for _, pr := range s.p.fleet.procs() {
		sm := sample{at: at, slot: pr.slot, proc: pr.proc, pid: pr.pid, lag: lag, goroutines: -1}
		var err error
		if sm.rss, sm.hwm, err = procstat.Memory(pr.pid); err != nil {
			errs++
			continue
		}
		fds, sockets, err := procSockets(pr.pid)
		if err != nil {
			errs++
			continue
		}
		sm.fds = fds
		ports, err := tcpEstablished(pr.pid, sockets)
		if err != nil {
			errs++
			continue
		}
		for _, port := range ports {
			sm.tcp++
			switch {
			case s.kafkaPorts[port]:
				sm.tcpKafka++
			case s.pgPorts[port]:
				sm.tcpPG++
			}
		}
		if g, h, err := readStatus(filepath.Join(s.statusDir, pr.proc+".status")); err == nil {
			sm.goroutines, sm.heap = g, h
		}
		got = append(got, sm)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs += errs
	s.samples = append(s.samples, got...)
	for _, sm := range got {
		_ = s.csv.Write(sm.record())
	}
	if mark != "" {
		s.marks[mark] = at
	}
}

// groupLag is the share group's lag on the job topic: records not yet
// acknowledged, summed over its partitions; -1 when the broker does not
// say for every partition.
func (s *sampler) groupLag(ctx context.Context) int64 {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	offs, err := s.p.adm.DescribeShareGroupOffsets(cctx, s.p.group)
	if err != nil {
		return -1
	}
	g, ok := offs[s.p.group]
	if !ok || g.Err != nil {
		return -1
	}
	var sum int64
	n, known := 0, true
	g.Offsets.Each(func(o kadm.ShareOffset) {
		if o.Topic != s.p.topic {
			return
		}
		n++
		if o.Err != nil || o.Lag < 0 { // a partition the group has not initialised yet
			known = false
		}
		sum += o.Lag
	})
	if n == 0 || !known {
		return -1
	}
	return sum
}

// series returns the samples of one process, by time.
func series(samples []sample, proc string) []sample {
	var out []sample
	for _, s := range samples {
		if s.proc == proc {
			out = append(out, s)
		}
	}
	return out
}

// at returns the first sample of ss at or after t (the last one if none).
func at(ss []sample, t time.Duration) sample {
	for _, s := range ss {
		if s.at >= t {
			return s
		}
	}
	return ss[len(ss)-1]
}

// slopePerHour fits y = a + b·t by least squares over ss (t in hours)
// and returns b; 0 with fewer than two distinct times.
func slopePerHour(ss []sample, y func(sample) float64) float64 {
	n := 0.0
	var st, sy, stt, sty float64
	for _, s := range ss {
		v := y(s)
		if math.IsNaN(v) {
			continue
		}
		t := s.at.Hours()
		n++
		st += t
		sy += v
		stt += t * t
		sty += t * v
	}
	d := n*stt - st*st
	if n < 2 || d <= 0 {
		return 0
	}
	return (n*sty - st*sy) / d
}

// procStats summarises one worker process's series.
type procStats struct {
	proc                  string
	first, last           sample
	peakRSS, hwm          int64
	maxGo, maxFDs, maxTCP int
	firstGo               int // the first goroutine count read (the status file comes a moment after the process starts)
	span                  time.Duration
	slope                 map[string]float64 // per hour: rss_mib, heap_mib, goroutines, fds, tcp
}

func statsOf(ss []sample) procStats {
	st := procStats{proc: ss[0].proc, first: ss[0], last: ss[len(ss)-1], slope: map[string]float64{}, firstGo: -1}
	st.span = st.last.at - st.first.at
	for _, s := range ss {
		st.peakRSS = max(st.peakRSS, s.rss)
		st.hwm = max(st.hwm, s.hwm)
		st.maxGo = max(st.maxGo, s.goroutines)
		st.maxFDs = max(st.maxFDs, s.fds)
		st.maxTCP = max(st.maxTCP, s.tcp)
		if st.firstGo < 0 {
			st.firstGo = s.goroutines
		}
	}
	goro := func(s sample) float64 {
		if s.goroutines < 0 {
			return math.NaN()
		}
		return float64(s.goroutines)
	}
	st.slope["rss_mib"] = slopePerHour(ss, func(s sample) float64 { return float64(s.rss) / (1 << 20) })
	st.slope["goroutines"] = slopePerHour(ss, goro)
	st.slope["heap_mib"] = slopePerHour(ss, func(s sample) float64 {
		if s.goroutines < 0 { // no status file read
			return math.NaN()
		}
		return float64(s.heap) / (1 << 20)
	})
	st.slope["fds"] = slopePerHour(ss, func(s sample) float64 { return float64(s.fds) })
	st.slope["tcp"] = slopePerHour(ss, func(s sample) float64 { return float64(s.tcp) })
	return st
}

// slopeMinSpan is the shortest series the report fits a slope to: over
// less, a reconnect or a burst of jobs is most of the slope.
const slopeMinSpan = 5 * time.Minute

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// samplerSection is the sampler's part of a phase's report: for each
// worker process, its peak resident set, and its goroutines, descriptors
// and connections first / last / max with a slope per hour.
type samplerSection struct {
	name    string
	samples []sample
	maxLag  int64
	errs    int
}

func (s *sampler) section() *samplerSection {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := &samplerSection{name: s.p.name, samples: slices.Clone(s.samples), errs: s.errs}
	for _, sm := range s.samples {
		sec.maxLag = max(sec.maxLag, sm.lag)
	}
	return sec
}

// procNames returns the processes sampled, in the order they first appear.
func procNames(samples []sample) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range samples {
		if !seen[s.proc] {
			seen[s.proc] = true
			out = append(out, s.proc)
		}
	}
	return out
}

func (sec *samplerSection) printTo(w io.Writer) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	if len(sec.samples) == 0 {
		pf("samples                  none")
		return
	}
	pf("samples                  %d readings of %d worker processes every %v (samples.csv, samples.png in the logs); group lag peaked at %d records", len(sec.samples), len(procNames(sec.samples)), sampleEvery, sec.maxLag)
	if sec.errs > 0 {
		pf("  failed readings        %d (a process that exited between the listing and the reading)", sec.errs)
	}
	pf("  %-8s %6s %10s %10s  %-25s %-18s %-18s %s", "process", "span", "peak RSS", "VmHWM", "goroutines first/last/max", "fds first/last/max", "tcp first/last/max",
		fmt.Sprintf("slopes per hour (RSS MiB, goroutines, fds, tcp; processes that ran %v or more)", slopeMinSpan))
	for _, name := range procNames(sec.samples) {
		st := statsOf(series(sec.samples, name))
		slopes := "-"
		if st.span >= slopeMinSpan {
			slopes = fmt.Sprintf("%+.1f, %+.1f, %+.1f, %+.1f", st.slope["rss_mib"], st.slope["goroutines"], st.slope["fds"], st.slope["tcp"])
		}
		pf("  %-8s %6s %10s %10s  %-25s %-18s %-18s %s", name, st.span.Round(time.Second), mib(st.peakRSS), mib(st.hwm),
			fmt.Sprintf("%d/%d/%d", st.firstGo, st.last.goroutines, st.maxGo),
			fmt.Sprintf("%d/%d/%d", st.first.fds, st.last.fds, st.maxFDs),
			fmt.Sprintf("%d/%d/%d", st.first.tcp, st.last.tcp, st.maxTCP), slopes)
	}
}

func (sec *samplerSection) problems() []string { return nil }

// phaseExt is a phase's state for the sampler, the overload phase and the
// endurance mode, kept apart from phase's own fields.
type phaseExt struct {
	smp         *sampler
	produceFrom int                // produce writes p.jobs from this index on
	rate        float64            // jobs per second produce writes at; 0: -rate
	padding     []kgo.RecordHeader // added to every job record (the overload phase's bulk)
	ov          *overloadRun
}

// reportSection is a part of a phase's report that its own code prints
// and checks.
type reportSection interface {
	printTo(w io.Writer)
	problems() []string
}

// produceRate is the rate produce writes jobs at.
func (p *phase) produceRate() float64 {
	if p.ext.rate > 0 {
		return p.ext.rate
	}
	return p.o.rate
}

// extraWorkerArgs are the worker flags the sampler and the overload phase
// add; a flag given twice takes its last value.
func (p *phase) extraWorkerArgs() []string {
	args := []string{"-status-dir", p.ext.smp.statusDir}
	if p.name == phaseOverload {
		args = append(args, "-max-bytes-in-hand", strconv.FormatInt(p.o.ext.ovBytesInHand, 10))
	}
	if p.rateLimited() {
		args = append(args, "-topic-rate", strconv.Itoa(soakCodeRate))
	}
	if p.o.healStalls {
		args = append(args, "-heal-stalls")
	}
	return args
}

// sections returns the report sections of the phase.
func (p *phase) sections() []reportSection {
	sec := p.ext.smp.section()
	out := []reportSection{sec}
	if p.ext.ov != nil {
		out = append(out, p.ext.ov.section(p, sec))
	}
	if p.o.ext.duration > 0 {
		out = append(out, p.enduranceSection(sec))
	}
	return out
}
