package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/procstat"
	"github.com/shareq/shareq/worker"
)

// Bigrecords scenario: bigRecords records of bigRecordSize on one
// partition, run by one worker process (this executable, re-executed, so
// that its memory is the worker's alone) per variant, each in a share
// group of its own from the earliest offset; the bench samples the
// process's resident set from /proc.
const (
	bigRecordSize = 1 << 20
	bigRecords    = 500
	bigJobDur     = 20 * time.Millisecond
	bigTimeout    = 5 * time.Minute
	// bigSampleEvery is how often the bench reads the worker's VmRSS;
	// VmHWM, the kernel's own peak, is read at the end.
	bigSampleEvery = 10 * time.Millisecond
	// bigWorkerCmd is the hidden command that makes shareq-bench a
	// bigrecords worker process.
	bigWorkerCmd = "bigrecords-worker"
)

// bigVariant is one worker's settings: Concurrency and MaxBytesInHand.
type bigVariant struct {
	conc  int
	bound int64
}

// bigVariants: the bound at Concurrency 8 (where the count alone allows
// 8 running + 8 prefetched records, 16 MiB) and at Concurrency 64 (128
// MiB by count), beside a bound too large to bind.
var bigVariants = []bigVariant{{8, 16 << 20}, {8, 4 << 20}, {64, 16 << 20}, {64, 1 << 30}}

// bigRun is the outcome of one variant.
type bigRun struct {
	Variant  string
	Idle     bool // the worker on an empty topic, until it joined
	Bound    int64
	Jobs     int   // distinct jobs run
	Dups     int   // runs beyond one per job
	PeakRSS  int64 // the largest VmRSS sampled, bytes
	HWM      int64 // VmHWM at the end: the kernel's peak resident set, bytes
	Makespan time.Duration
}

func (v bigVariant) String() string {
	return fmt.Sprintf("concurrency=%d MaxBytesInHand=%s", v.conc, mib(v.bound))
}

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + "MiB" }

// bigRecordsScenario runs the scenario and adds its rows.
func bigRecordsScenario(ctx context.Context, c *cluster, log *slog.Logger, quick bool,
	add func(scenario, variant, metric string, v float64, unit, note string), progress func(string)) error {
	n := bigRecords
	if quick {
		n = 100
	}
	runs, err := runBigRecords(ctx, c, log, n, progress)
	bigRows(runs, n, add)
	return err
}

// runBigRecords produces n records once and runs every variant on them.
func runBigRecords(ctx context.Context, c *cluster, log *slog.Logger, n int, progress func(string)) ([]bigRun, error) {
	topic, err := c.topic(ctx, "bigrecords", 1)
	if err != nil {
		return nil, err
	}
	// Kafka refuses batches over max.message.bytes (1 MiB and a few bytes
	// by default): a 1 MiB value and its overhead need more.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	maxMsg := strconv.Itoa(2 * bigRecordSize)
	resp, err := c.adm.AlterTopicConfigs(actx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &maxMsg}}, topic)
	cancel()
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		return nil, fmt.Errorf("topic %s: max.message.bytes: %w", topic, err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ProducerBatchMaxBytes(2*bigRecordSize),
		kgo.ProducerLinger(0), kgo.MaxBufferedBytes(64<<20))
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("bigrecords: producing %d records of %s", n, mib(bigRecordSize)))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	for i := 0; i < n && err == nil; i += 50 {
		recs := make([]*kgo.Record, 0, 50)
		for j := i; j < min(i+50, n); j++ {
			v := make([]byte, bigRecordSize)
			binary.BigEndian.PutUint32(v, uint32(j))
			recs = append(recs, &kgo.Record{Topic: topic, Value: v})
		}
		err = prod.ProduceSync(pctx, recs...).FirstErr()
	}
	cancel()
	prod.Close()
	if err != nil {
		return nil, fmt.Errorf("produce: %w", err)
	}
	var runs []bigRun
	var errs []error
	// An idle worker's resident set: the runtime and the clients.
	if empty, err := c.topic(ctx, "bigrecords-idle", 1); err != nil {
		errs = append(errs, err)
	} else {
		progress("bigrecords: an idle worker")
		r, err := runBigVariant(ctx, c, log, empty, 0, bigVariants[0])
		if err != nil {
			errs = append(errs, fmt.Errorf("idle: %w", err))
		}
		r.Variant, r.Idle = "idle worker (empty topic, until joined)", true
		runs = append(runs, r)
	}
	for _, v := range bigVariants {
		progress("bigrecords: " + v.String())
		r, err := runBigVariant(ctx, c, log, topic, n, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", v, err))
		}
		runs = append(runs, r)
		if ctx.Err() != nil {
			break
		}
	}
	return runs, errors.Join(errs...)
}

// runBigVariant runs one worker process on topic in a new group until
// it has run all n jobs (n 0: until it joined the group), sampling its
// resident set.
func runBigVariant(ctx context.Context, c *cluster, log *slog.Logger, topic string, n int, v bigVariant) (bigRun, error) {
	run := bigRun{Variant: v.String(), Bound: v.bound}
	group, err := c.shareGroup(ctx, "bigrecords")
	if err != nil {
		return run, err
	}
	exe, err := os.Executable()
	if err != nil {
		return run, err
	}
	cmd := exec.Command(exe, bigWorkerCmd, "-brokers", strings.Join(c.seeds, ","), "-group", group, "-topic", topic,
		"-concurrency", strconv.Itoa(v.conc), "-max-bytes", strconv.FormatInt(v.bound, 10), "-job", bigJobDur.String())
	in, err := cmd.StdinPipe()
	if err != nil {
		return run, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return run, err
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	comp := newCompletions(n)
	comp.start()
	if err := cmd.Start(); err != nil {
		return run, err
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var idx int
			if _, err := fmt.Sscanf(sc.Text(), "done %d", &idx); err == nil {
				comp.done(idx)
			}
		}
	})
	sampled := make(chan struct{})
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(bigSampleEvery)
		defer tick.Stop()
		for {
			if rss, _, err := procstat.Memory(cmd.Process.Pid); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	if n == 0 {
		err = c.waitShareMembers(ctx, group, 1)
	} else {
		err = waitAll(ctx, comp, bigTimeout)
	}
	close(stopSampling)
	<-sampled
	_, run.HWM, _ = procstat.Memory(cmd.Process.Pid)
	run.PeakRSS = peak.Load()
	_ = in.Close()
	t := time.AfterFunc(burstStopTimeout, func() { _ = cmd.Process.Kill() })
	if werr := cmd.Wait(); werr != nil {
		err = errors.Join(err, fmt.Errorf("worker: %w: %s", werr, strings.TrimSpace(stderr.String())))
	} else if stderr.Len() > 0 {
		log.Warn("bigrecords worker logged", "variant", run.Variant, "stderr", stderr.String())
	}
	t.Stop()
	readers.Wait()
	var times []time.Duration
	times, run.Makespan, run.Dups = comp.result()
	run.Jobs = len(times)
	return run, err
}

// runBigWorker is a bigrecords worker process: a shareq worker on topic
// whose jobs sleep -job and then write "done INDEX" to stdout (the index
// is the value's first four bytes). It stops gracefully when stdin reaches
// EOF or ctx ends.
func runBigWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(bigWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "seed brokers, comma-separated")
	group := fs.String("group", "", "share group")
	topic := fs.String("topic", "", "job topic")
	conc := fs.Int("concurrency", 8, "handler slots")
	maxBytes := fs.Int64("max-bytes", worker.MaxBytesInHandDefault, "worker.MaxBytesInHand")
	job := fs.Duration("job", bigJobDur, "how long each job sleeps")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *group == "" || *topic == "" {
		return errors.New(bigWorkerCmd + ": -brokers, -group and -topic are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	var mu sync.Mutex
	h := handler.Func(func(ctx context.Context, j *handler.Job) error {
		if len(j.Value) < 4 {
			return handler.Permanent(errors.New("short value"))
		}
		if err := sleepCtx(ctx, *job); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Fprintf(stdout, "done %d\n", binary.BigEndian.Uint32(j.Value))
		return err
	})
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(worker.Brokers(strings.Split(*brokers, ",")...), worker.Group(*group), worker.Handle(*topic, h),
		worker.Concurrency(*conc), worker.MaxBytesInHand(*maxBytes), worker.ShutdownTimeout(5*time.Second),
		worker.Logger(log))
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// bigWorkerMain runs a bigrecords worker process and returns its exit code.
func bigWorkerMain(ctx context.Context, args []string) int {
	if err := runBigWorker(ctx, args, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shareq-bench "+bigWorkerCmd+":", err)
		return 1
	}
	return 0
}

// bigRows turns the runs into result rows.
func bigRows(runs []bigRun, n int, add func(scenario, variant, metric string, v float64, unit, note string)) {
	for _, r := range runs {
		if r.Idle {
			add("bigrecords", r.Variant, "peak_rss", float64(r.HWM)/(1<<20), "MiB", "VmHWM")
			continue
		}
		add("bigrecords", r.Variant, "peak_rss", float64(r.HWM)/(1<<20), "MiB",
			fmt.Sprintf("VmHWM; VmRSS sampled every %v peaked at %.1f MiB", bigSampleEvery, float64(r.PeakRSS)/(1<<20)))
		if r.Bound < 1<<30 {
			add("bigrecords", r.Variant, "peak_rss_vs_bound", float64(r.HWM)/float64(r.Bound), "x", "VmHWM / MaxBytesInHand")
		}
		add("bigrecords", r.Variant, "jobs", float64(r.Jobs), "count", fmt.Sprintf("want %d; duplicate runs %d", n, r.Dups))
		add("bigrecords", r.Variant, "makespan", r.Makespan.Seconds(), "s", fmt.Sprintf("jobs of %v, from the worker process's start", bigJobDur))
	}
}
