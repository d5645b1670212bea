package main

import (
	"context"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/procstat"
)

// A /proc/net/tcp table: one row per state that matters.
const netTCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A0E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C350 0100007F:A0E8 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:C351 0100007F:64E8 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:C352 0100007F:64E8 06 00000000:00000000 03:00000F13 00000000     0        0 0 3 0000000000000000
   4: 0100007F:C353 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 444 1 0000000000000000 20 4 30 10 -1
`

func TestParseNetTCP(t *testing.T) {
	// 111 listens, 444 is another process's: only 222 and 333 count.
	ports, err := parseNetTCP(strings.NewReader(netTCP), map[uint64]bool{111: true, 222: true, 333: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0xA0E8, 0x64E8}; !slices.Equal(ports, want) {
		t.Fatalf("ports %v, want %v", ports, want)
	}
	if _, err := parseNetTCP(strings.NewReader("header\n 0: 0100007F:A0E8 0100007F 01 x x x x x 222\n"), map[uint64]bool{222: true}); err == nil {
		t.Fatal("a remote address without a port parsed")
	}
}

// TestProcSamplesOwnProcess reads this test process as the sampler reads
// a worker: its memory, its descriptors, and a loopback connection it
// opens, counted once by its remote port.
func TestProcSamplesOwnProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if sc := <-accepted; sc != nil {
		defer sc.Close()
	}
	port := ln.Addr().(*net.TCPAddr).Port

	pid := os.Getpid()
	rss, hwm, err := procstat.Memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || hwm < rss {
		t.Fatalf("VmRSS %d, VmHWM %d: want 0 < RSS <= HWM", rss, hwm)
	}
	fds, sockets, err := procSockets(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(sockets) < 3 || fds < len(sockets) {
		t.Fatalf("%d descriptors, %d sockets: want the listener and both ends of the connection", fds, len(sockets))
	}
	ports, err := tcpEstablished(pid, sockets)
	if err != nil {
		t.Fatal(err)
	}
	// Both ends are ours: the client's remote port is the listener's, the
	// server's is the client's. Other sockets of this process (clients of
	// brokers other tests started, which listen on ephemeral ports too) may
	// have the same remote ports: at least one each, not exactly one.
	if n := count(ports, port); n < 1 {
		t.Fatalf("remote ports %v: no connection to %d (the client's end)", ports, port)
	}
	if want := c.LocalAddr().(*net.TCPAddr).Port; count(ports, want) < 1 {
		t.Fatalf("remote ports %v: no connection to %d (the server's end)", ports, want)
	}
	c.Close()
}

func count(ports []int, p int) int {
	n := 0
	for _, q := range ports {
		if q == p {
			n++
		}
	}
	return n
}

func TestStatusFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	old := workerExtra.statusDir
	workerExtra.statusDir = dir
	defer func() { workerExtra.statusDir = old }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); writeStatus(ctx, "w9.1") }()
	path := filepath.Join(dir, "w9.1.status")
	deadline := time.Now().Add(10 * time.Second)
	var g int
	var heap int64
	var err error
	for time.Now().Before(deadline) { // the first write comes at once
		if g, heap, err = readStatus(path); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if g < 2 || heap <= 0 { // this test and writeStatus at least
		t.Fatalf("goroutines %d, heap %d", g, heap)
	}
	if err := os.WriteFile(path, []byte("goroutines x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readStatus(path); err == nil {
		t.Fatal("a malformed status file parsed")
	}
}

func TestSlopePerHour(t *testing.T) {
	var ss []sample
	for i := range 10 {
		// 2 goroutines more every 6 minutes: 20 per hour; two unknown.
		g := 100 + 2*i
		if i == 0 || i == 4 { // no status file read yet, or read failed
			g = -1
		}
		ss = append(ss, sample{at: time.Duration(i) * 6 * time.Minute, goroutines: g, rss: int64(50+i) << 20, heap: int64(2*i) << 20})
	}
	st := statsOf(ss)
	if got := st.slope["goroutines"]; math.Abs(got-20) > 1e-9 {
		t.Fatalf("goroutine slope %v/h, want 20", got)
	}
	if got := st.slope["rss_mib"]; math.Abs(got-10) > 1e-9 {
		t.Fatalf("RSS slope %v MiB/h, want 10", got)
	}
	if got := st.slope["heap_mib"]; math.Abs(got-20) > 1e-9 {
		t.Fatalf("heap slope %v MiB/h, want 20", got)
	}
	if st.firstGo != 102 || st.last.goroutines != 118 || st.maxGo != 118 {
		t.Fatalf("first %d last %d max %d", st.firstGo, st.last.goroutines, st.maxGo)
	}
	if got := slopePerHour(ss[:1], func(s sample) float64 { return 1 }); got != 0 {
		t.Fatalf("one sample: slope %v, want 0", got)
	}
}

func TestApplyExt(t *testing.T) {
	parse := func(args ...string) (options, int) {
		var o options
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.DurationVar(&o.durationLimit, "duration-limit", 15*time.Minute, "")
		registerExtFlags(fs, &o.ext)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		o.rate, o.workers, o.jobs = 100, 4, 20000
		return o, applyExt(&o, fs)
	}
	o, code := parse("-duration", "1h")
	if code != 0 || !o.single || o.jobs != 360000 || o.durationLimit != time.Hour+enduranceMargin {
		t.Fatalf("-duration 1h: code %d, single %v, jobs %d, limit %v", code, o.single, o.jobs, o.durationLimit)
	}
	if o, _ := parse("-duration", "10m", "-duration-limit", "2h"); o.durationLimit != 2*time.Hour {
		t.Fatalf("-duration-limit 2h given: limit %v", o.durationLimit)
	}
	for _, bad := range [][]string{
		{"-overload-factor", "1"},
		{"-overload-record-size", "10"},
		{"-overload-bytes-in-hand", "1000"},
		{"-overload-workers", "1"},
		{"-duration", "-1s"},
		{"-duration", "1h", "-overload"},
	} {
		if _, code := parse(bad...); code != 2 {
			t.Errorf("%v: code %d, want 2", bad, code)
		}
	}
}

func TestEnduranceSchedule(t *testing.T) {
	p := &phase{o: options{ext: optionsExt{duration: 12 * time.Minute}}, rng: rand.New(rand.NewPCG(1, 2))}
	// Cycles at 0 and 5 minutes: the rest, under half a cycle, has none.
	window := 12 * time.Minute
	fs := p.schedule(window)
	if want := 2 * len(enduranceKinds); len(fs) != want {
		t.Fatalf("%d faults, want %d", len(fs), want)
	}
	if n := len(p.schedule(13 * time.Minute)); n != 3*len(enduranceKinds) {
		t.Fatalf("13 minutes: %d faults, want three cycles' %d", n, 3*len(enduranceKinds))
	}
	for i, f := range fs {
		if f.at < 0 || f.at > window || (i > 0 && f.at < fs[i-1].at) {
			t.Fatalf("fault %d at %v: out of the window or of order", i, f.at)
		}
	}
	running := map[int]string{0: "w1.1", 1: "w2.3", 2: "w3.1"}
	if got := p.faultable(running); len(got) != 2 || got[0] != "" {
		t.Fatalf("faultable %v: want all but w1", got)
	}
	if got := p.faultable(map[int]string{0: "w1.1"}); len(got) != 1 {
		t.Fatalf("faultable with only w1 running: %v", got)
	}
}

// TestOverloadChecks feeds the overload phase's checks a series of two
// workers: one within the bound and flat, one that breaks each rule in
// turn.
func TestOverloadChecks(t *testing.T) {
	const mb = 1 << 20
	ov := &overloadRun{bound: 4 * mb, recordSize: 64 << 10, concurrency: 64, rate: 20, prodJobs: 2000}
	// idle at 0s, warm at 10s, the peak at 20s, end at 30s.
	series := func(proc string, peak int64, endGo, endTCP int, endLag int64) []sample {
		return []sample{
			{at: 0, proc: proc, slot: proc[:2], rss: 20 * mb, hwm: 20 * mb, goroutines: 10, fds: 10, tcp: 3, lag: -1},
			{at: 10 * time.Second, proc: proc, slot: proc[:2], rss: 40 * mb, hwm: 40 * mb, goroutines: 80, fds: 77, tcp: 68, lag: 0},
			{at: 20 * time.Second, proc: proc, slot: proc[:2], rss: peak, hwm: peak, goroutines: 82, fds: 78, tcp: 69, lag: 1800},
			{at: 30 * time.Second, proc: proc, slot: proc[:2], rss: 45 * mb, hwm: peak, goroutines: endGo, fds: 77, tcp: endTCP, lag: endLag},
		}
	}
	check := func(w2 []sample) []string {
		p := &phase{timings: map[string]time.Duration{"drain": time.Minute}}
		p.ext.smp = &sampler{marks: map[string]time.Duration{"idle": 0, "warm": 10 * time.Second, "end": 30 * time.Second}}
		samples := append(series("w1.1", 60*mb, 80, 68, 0), w2...)
		sec := &samplerSection{samples: samples, maxLag: 1800}
		for _, s := range samples {
			sec.maxLag = max(sec.maxLag, s.lag)
		}
		out := ov.section(p, sec)
		var b strings.Builder
		out.printTo(&b) // prints whatever it found
		return out.problems()
	}
	// The limit: warm 40 + 2 x (4 + 2) + 16 = 68 MiB.
	if probs := check(series("w2.1", 68*mb, 85, 70, 0)); len(probs) != 0 {
		t.Fatalf("within every rule: %v", probs)
	}
	for name, w2 := range map[string][]sample{
		"over the bound":   series("w2.1", 69*mb, 80, 68, 0),
		"goroutines grew":  series("w2.1", 60*mb, 91, 68, 0),
		"connections grew": series("w2.1", 60*mb, 80, 72, 0),
		"lag left":         series("w2.1", 60*mb, 80, 68, 5),
		"restarted":        series("w2.1", 60*mb, 80, 68, 0)[1:],
	} {
		if probs := check(w2); len(probs) != 1 {
			t.Errorf("%s: problems %q, want one", name, probs)
		}
	}
}

// A slot whose connections go through its silent-fault proxies has them
// counted as the broker's and Postgres's: the sampler learns the proxies'
// ports from routeSilent (before, every such connection counted as
// neither).
func TestSamplerCountsProxiedConnections(t *testing.T) {
	broker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	pg, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	p := &phase{name: phaseSingle, seeds: []string{broker.Addr().String()}, pgURL: "postgres://u:p@" + pg.Addr().String() + "/db"}
	p.o.silentBroker, p.o.silentPostgres = true, true
	p.logDir = t.TempDir()
	p.fleet = &fleet{slots: []*slot{{name: "w1"}, {name: "w2"}}}
	smp, err := p.newSampler()
	if err != nil {
		t.Fatal(err)
	}
	defer smp.csvFile.Close()
	p.ext.smp = smp
	closeRoutes, err := p.routeSilent()
	defer closeRoutes()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range p.fleet.slots {
		if len(s.extra) != 4 {
			t.Fatalf("slot %s: extra flags %v, want -kafka-via and -pg", s.name, s.extra)
		}
		for _, c := range []struct {
			what  string
			addr  string
			ports map[int]bool
		}{
			{"broker proxy", p.silent.kafka[i].Addr(), smp.kafkaPorts},
			{"Postgres proxy", p.silent.pg[i].Addr(), smp.pgPorts},
		} {
			_, port, _ := net.SplitHostPort(c.addr)
			n, _ := strconv.Atoi(port)
			if !c.ports[n] {
				t.Errorf("slot %s: its %s's port %d is not counted (%v)", s.name, c.what, n, c.ports)
			}
		}
	}
	// The overload phase throws no silent fault: no proxies.
	p.name, p.silent = phaseOverload, nil
	p.fleet.slots[0].extra = nil
	closeOverload, err := p.routeSilent()
	defer closeOverload()
	if err != nil || p.silent != nil || p.fleet.slots[0].extra != nil {
		t.Errorf("overload phase: routeSilent %v, routes %v, extra %v; want none", err, p.silent, p.fleet.slots[0].extra)
	}
}
