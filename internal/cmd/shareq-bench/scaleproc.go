package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// scaleWorkerCmd is the hidden command that makes shareq-bench a worker
// process of the scale scenario (the scenario re-executes itself, so that
// each worker is an OS process of its own whose CPU time can be read).
const scaleWorkerCmd = "scale-worker"

// scaleReportEvery is how often a scale worker process reports its
// counts on stdout.
const scaleReportEvery = 50 * time.Millisecond

// reqCounter is a kgo hook counting the requests a client writes to the
// brokers, by request name, and noting when each was first written.
type reqCounter struct {
	t0    time.Time
	mu    sync.Mutex
	n     map[int16]int64
	first map[int16]time.Duration // since t0
	// beats is the number of ShareGroupHeartbeats written before the
	// first ShareFetch.
	beats int64
}

func newReqCounter(t0 time.Time) *reqCounter {
	return &reqCounter{t0: t0, n: map[int16]int64{}, first: map[int16]time.Duration{}}
}

func (c *reqCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	c.mu.Lock()
	if c.n[key]++; c.n[key] == 1 {
		c.first[key] = time.Since(c.t0)
		if key == kmsg.ShareFetch.Int16() {
			c.beats = c.n[kmsg.ShareGroupHeartbeat.Int16()]
		}
	}
	c.mu.Unlock()
}

// firstShareFetch returns when the first ShareFetch was written (the
// member had an assignment), or 0, how many heartbeats went before it,
// and when the first heartbeat (the join) was written.
func (c *reqCounter) firstShareFetch() (fetch time.Duration, beats int64, join time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first[kmsg.ShareFetch.Int16()], c.beats, c.first[kmsg.ShareGroupHeartbeat.Int16()]
}

// line formats the counts as "Name=n" fields, sorted by name.
func (c *reqCounter) line() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	fields := make([]string, 0, len(c.n))
	for k, n := range c.n {
		fields = append(fields, kmsg.NameForKey(k)+"="+strconv.FormatInt(n, 10))
	}
	slices.Sort(fields)
	return strings.Join(fields, " ")
}

// runScaleWorker is a scale worker process: a shareq worker with a no-op
// handler on every topic of -topics, or with -raw the raw franz-go share
// loop of the overhead scenario (one client, default batches with
// prefetch, accept every record). Its clients count their requests (a
// kgo hook). It writes to stdout
//
//	checked NANOS          once Check returned, NANOS after worker.New began
//	fetch NANOS BEATS JOIN at the first job, when the first ShareFetch was
//	                       written, NANOS after worker.New began, after
//	                       BEATS ShareGroupHeartbeats, the first of them
//	                       (the join) JOIN nanoseconds after worker.New
//	first NANOS            at the first job, NANOS after worker.New began
//	n JOBS LAST CPU Name=n...
//	                       every scaleReportEvery and at the end: jobs
//	                       run, the Unix nanoseconds of the last one, the
//	                       process's user + system CPU nanoseconds so far
//	                       (getrusage: every thread, at a finer grain
//	                       than the clock ticks of /proc/PID/stat), and
//	                       the requests written so far by name
//
// and stops gracefully when stdin reaches EOF (the bench closes it) or
// ctx ends.
func runScaleWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(scaleWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "seed brokers, comma-separated")
	group := fs.String("group", "", "share group")
	topics := fs.String("topics", "", "job topics, comma-separated")
	conc := fs.Int("concurrency", scaleConcurrency, "handler slots")
	raw := fs.Bool("raw", false, "run the raw franz-go share loop instead of a worker")
	status := fs.String("status-topic", "-", "the worker's StatusTopic (\"\": none); \"-\": the worker's default")
	controls := fs.String("control-topic", "-", "the worker's ControlTopic (\"\": none); \"-\": the worker's default")
	assignEvery := fs.String("assignment-interval", "-", "the worker's AssignmentInterval (0: the group's, Kafka's 1 s); \"-\": the worker's default")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the process to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *brokers == "" || *group == "" || *topics == "" {
		return errors.New(scaleWorkerCmd + ": -brokers, -group and -topics are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	var jobs, last atomic.Int64
	first := make(chan struct{})
	var firstOnce sync.Once
	done := func(n int) {
		jobs.Add(int64(n))
		last.Store(time.Now().UnixNano())
		firstOnce.Do(func() { close(first) })
	}
	out := bufio.NewWriter(stdout)
	report := func(format string, a ...any) error {
		fmt.Fprintf(out, format, a...)
		return out.Flush()
	}
	t0 := time.Now()
	reqs := newReqCounter(t0)
	ran := make(chan error, 1)
	if *raw {
		go func() {
			ran <- rawShareProc(ctx, strings.Split(*brokers, ","), *group, strings.Split(*topics, ","), reqs, done)
		}()
	} else {
		var tl *tailLog
		if os.Getenv(scaleStatsEnv) != "" {
			tl = &tailLog{t0: t0}
			defer tl.write(stderr)
		}
		nop := handler.Func(func(_ context.Context, j *handler.Job) error {
			done(1)
			if tl != nil {
				tl.add(j)
			}
			return nil
		})
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		opts := []worker.Option{worker.Brokers(strings.Split(*brokers, ",")...), worker.Group(*group),
			worker.Concurrency(*conc), worker.ShutdownTimeout(5 * time.Second), worker.Logger(log),
			worker.ClientOpts(kgo.WithHooks(reqs))}
		if *status != "-" {
			opts = append(opts, worker.StatusTopic(*status))
		}
		if *controls != "-" {
			opts = append(opts, worker.ControlTopic(*controls))
		}
		if *assignEvery != "-" {
			d, err := time.ParseDuration(*assignEvery)
			if err != nil {
				return fmt.Errorf("-assignment-interval: %w", err)
			}
			opts = append(opts, worker.AssignmentInterval(d))
		}
		for _, t := range strings.Split(*topics, ",") {
			opts = append(opts, worker.Handle(t, nop))
		}
		if os.Getenv(scaleStatsEnv) != "" {
			opts = append(opts, worker.Observers(statsLogger{w: stderr, t0: t0, jobs: &jobs}))
		}
		w, err := worker.New(opts...)
		if err != nil {
			return err
		}
		if err := w.Check(ctx); err != nil {
			return err
		}
		if err := report("checked %d\n", time.Since(t0)); err != nil {
			return err
		}
		go func() { ran <- w.Run(ctx) }()
	}
	counts := func() error {
		cpu, err := selfCPU()
		if err != nil {
			return err
		}
		return report("n %d %d %d %s\n", jobs.Load(), last.Load(), cpu, reqs.line())
	}
	tick := time.NewTicker(scaleReportEvery)
	defer tick.Stop()
	for {
		select {
		case <-first:
			fetch, beats, join := reqs.firstShareFetch()
			if err := report("fetch %d %d %d\nfirst %d\n", fetch, beats, join, time.Since(t0)); err != nil {
				return err
			}
			first = nil
		case <-tick.C:
			if err := counts(); err != nil {
				return err
			}
		case err := <-ran:
			return errors.Join(err, counts())
		}
	}
}

// rawShareProc is the raw share loop of a -raw scale worker: one client,
// default batches with prefetch, every record accepted, until ctx ends;
// then it flushes the acknowledgements.
func rawShareProc(ctx context.Context, seeds []string, group string, topics []string, reqs *reqCounter, done func(int)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ShareGroup(group), kgo.ConsumeTopics(topics...),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.WithHooks(reqs))
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		k := 0
		fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckAccept); k++ })
		if k > 0 {
			done(k)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.FlushAcks(fctx)
}

// scaleProc is one scale worker process and what it last reported.
type scaleProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer

	mu      sync.Mutex
	jobs    int64
	last    time.Time        // when its last job ran
	cpu     time.Duration    // its user + system time
	at      time.Time        // when its last report came in
	reqs    map[string]int64 // requests written, by name
	checked time.Duration    // worker.New to Check's return
	join    time.Duration    // worker.New to the first ShareGroupHeartbeat (the join)
	fetch   time.Duration    // worker.New to the first ShareFetch
	beats   int64            // heartbeats before the first ShareFetch
	first   time.Duration    // worker.New to the first job
}

// scaleProcs are the worker processes of one measurement.
type scaleProcs struct {
	procs []*scaleProc
	wg    sync.WaitGroup // the stdout readers
}

// scaleProfileEnv names a directory: when it is set, every scale worker
// process writes a CPU profile there, named after its group and number.
const scaleProfileEnv = "SHAREQ_BENCH_WORKER_CPUPROFILE"

// scaleStatsEnv, when set, has every scale worker process write its
// member's snapshots (worker.MemberStats, once a second) to its stderr,
// which the bench logs when the process ends: what the member did in a
// run that went slower than others.
const scaleStatsEnv = "SHAREQ_BENCH_WORKER_STATS"

// tailLog keeps when each job ran, to say where the last ones came from.
type tailLog struct {
	t0   time.Time
	mu   sync.Mutex
	jobs []tailJob
}

type tailJob struct {
	at        time.Duration
	topic     string
	partition int32
	offset    int64
	count     int32
}

func (l *tailLog) add(j *handler.Job) {
	at := time.Since(l.t0)
	l.mu.Lock()
	l.jobs = append(l.jobs, tailJob{at, j.Topic, j.Partition, j.Offset, j.DeliveryCount})
	l.mu.Unlock()
}

// write writes, for the jobs that ran in the last second of the run, a
// line per partition: how many, their offsets and times.
func (l *tailLog) write(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.jobs) == 0 {
		return
	}
	end := l.jobs[len(l.jobs)-1].at
	type span struct {
		n           int
		lo, hi      int64
		first, last time.Duration
		redelivered int
	}
	spans := map[int32]*span{}
	for _, j := range l.jobs {
		if j.at < end-time.Second {
			continue
		}
		s := spans[j.partition]
		if s == nil {
			s = &span{lo: j.offset, hi: j.offset, first: j.at}
			spans[j.partition] = s
		}
		s.n++
		s.lo, s.hi, s.last = min(s.lo, j.offset), max(s.hi, j.offset), j.at
		if j.count > 1 {
			s.redelivered++
		}
	}
	for _, p := range slices.Sorted(maps.Keys(spans)) {
		s := spans[p]
		fmt.Fprintf(w, "tail partition=%d jobs=%d offsets=%d-%d at=%v-%v redelivered=%d\n", p, s.n, s.lo, s.hi,
			s.first.Round(time.Millisecond), s.last.Round(time.Millisecond), s.redelivered)
	}
}

// statsLogger writes a worker's member snapshots, one line each.
type statsLogger struct {
	worker.NopObserver
	w    io.Writer
	t0   time.Time
	jobs *atomic.Int64
}

func (l statsLogger) MemberStats(s worker.MemberStats) {
	fmt.Fprintf(l.w, "stats t=%v jobs=%d fetches=%d whole=%d fetched=%d held=%d buffered=%d running=%d rtt=%v ack_errors=%d lost=%d sessions=%d/%d\n",
		time.Since(l.t0).Round(time.Millisecond), l.jobs.Load(), s.Fetches, s.WholeBatchFetches, s.Fetched, s.Held, s.Buffered, s.Running,
		s.FetchRTT.Round(100*time.Microsecond), s.AckErrors, s.LostRecords, s.SessionsOpened, s.SessionsReset)
}

// startScaleWorkers starts n processes of this executable as scale
// workers of group on topics, each of concurrency slots (with raw, raw
// share loops), with extra arguments of the scale-worker command.
func startScaleWorkers(n int, seeds []string, group string, topics []string, concurrency int, raw bool, extra ...string) (*scaleProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ps := &scaleProcs{}
	for range n {
		p := &scaleProc{stderr: new(bytes.Buffer), reqs: map[string]int64{}}
		args := []string{scaleWorkerCmd, "-brokers", strings.Join(seeds, ","), "-group", group,
			"-topics", strings.Join(topics, ","), "-concurrency", strconv.Itoa(concurrency), "-raw=" + strconv.FormatBool(raw)}
		args = append(args, extra...)
		if dir := os.Getenv(scaleProfileEnv); dir != "" {
			args = append(args, "-cpuprofile", filepath.Join(dir, fmt.Sprintf("%s-%d.prof", group, len(ps.procs))))
		}
		p.cmd = exec.Command(exe, args...)
		p.cmd.Stderr = p.stderr
		in, err := p.cmd.StdinPipe()
		if err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		out, err := p.cmd.StdoutPipe()
		if err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		if err := p.cmd.Start(); err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		p.stdin = in
		ps.procs = append(ps.procs, p)
		ps.wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.parse(sc.Text())
			}
		})
	}
	return ps, nil
}

// parse takes in one line of a scale worker's stdout.
func (p *scaleProc) parse(line string) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch f[0] {
	case "checked":
		p.checked = time.Duration(n)
	case "fetch":
		p.fetch = time.Duration(n)
		if len(f) > 2 {
			p.beats, _ = strconv.ParseInt(f[2], 10, 64)
		}
		if len(f) > 3 {
			join, _ := strconv.ParseInt(f[3], 10, 64)
			p.join = time.Duration(join)
		}
	case "first":
		p.first = time.Duration(n)
	case "n":
		if len(f) < 4 {
			return
		}
		last, err1 := strconv.ParseInt(f[2], 10, 64)
		cpu, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		p.jobs, p.cpu, p.at = n, time.Duration(cpu), time.Now()
		if last > 0 {
			p.last = time.Unix(0, last)
		}
		for _, kv := range f[4:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				if c, err := strconv.ParseInt(v, 10, 64); err == nil {
					p.reqs[k] = c
				}
			}
		}
	}
}

// scaleSnap is the processes' counts at one moment.
type scaleSnap struct {
	at   time.Time // when the latest of the reports summed came in
	jobs int64
	last time.Time     // the latest job of any process
	cpu  time.Duration // user + system time of the processes
	reqs map[string]int64
}

// snapshot sums what the processes reported last.
func (ps *scaleProcs) snapshot() scaleSnap {
	s := scaleSnap{reqs: map[string]int64{}}
	for _, p := range ps.procs {
		p.mu.Lock()
		if p.at.After(s.at) {
			s.at = p.at
		}
		s.cpu += p.cpu
		s.jobs += p.jobs
		if p.last.After(s.last) {
			s.last = p.last
		}
		for k, v := range p.reqs {
			s.reqs[k] += v
		}
		p.mu.Unlock()
	}
	return s
}

// startTimes is when one worker process reached each step of its start,
// after worker.New began.
type startTimes struct {
	checked, join, fetch, first time.Duration // Check returned, first heartbeat, first ShareFetch, first job
	beats                       int64         // the heartbeats before the first fetch
}

// startTimes returns the first process's start times (zero until it
// reported them).
func (ps *scaleProcs) startTimes() startTimes {
	p := ps.procs[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	return startTimes{checked: p.checked, join: p.join, fetch: p.fetch, first: p.first, beats: p.beats}
}

// selfCPU returns the user + system CPU time of this process (every
// thread).
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// stop closes every worker's stdin, waits for the processes (killing one
// that has not exited after burstStopTimeout) and logs what they wrote to
// stderr.
func (ps *scaleProcs) stop(log *slog.Logger) error {
	for _, p := range ps.procs {
		_ = p.stdin.Close()
	}
	var errs []error
	for i, p := range ps.procs {
		t := time.AfterFunc(burstStopTimeout, func() { _ = p.cmd.Process.Kill() })
		err := p.cmd.Wait()
		t.Stop()
		if err != nil {
			errs = append(errs, fmt.Errorf("scale worker %d: %w: %s", i, err, strings.TrimSpace(p.stderr.String())))
		} else if log != nil && p.stderr.Len() > 0 {
			log.Warn("scale worker logged", "worker", i, "stderr", p.stderr.String())
		}
	}
	ps.wg.Wait()
	return errors.Join(errs...)
}

// reqRates returns the requests per second of each name between two
// snapshots, and their sum.
func reqRates(a, b scaleSnap) (map[string]float64, float64) {
	dt := b.at.Sub(a.at).Seconds()
	out := map[string]float64{}
	var sum float64
	for _, k := range slices.Sorted(maps.Keys(b.reqs)) {
		if d := b.reqs[k] - a.reqs[k]; d > 0 {
			out[k] = float64(d) / dt
			sum += out[k]
		}
	}
	return out, sum
}
