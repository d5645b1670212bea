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
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Burst scenario: one enqueue call of burstJobs jobs on a topic of
// burstPartitions partitions, run by burstWorkers worker processes of
// burstConcurrency slots each.
const (
	burstPartitions  = 6
	burstWorkers     = 3
	burstConcurrency = 4
	burstJobs        = 48
	burstJobDur      = time.Second
	burstTimeout     = 2 * time.Minute
	// burstWorkerCmd is the hidden command that makes shareq-bench a
	// burst worker process (the scenario re-executes itself).
	burstWorkerCmd = "burst-worker"
)

// burstRun is the outcome of one burst run.
type burstRun struct {
	Variant    string
	Makespan   time.Duration
	PerWorker  []int // jobs each worker process ran, in start order
	Partitions int   // partitions the burst landed on
	Dups       int
}

// burstIdeal is the makespan of burstJobs jobs of burstJobDur on
// burstWorkers × burstConcurrency slots: ceil(N/(W·C))·d.
func burstIdeal() time.Duration {
	slots := burstWorkers * burstConcurrency
	return time.Duration((burstJobs+slots-1)/slots) * burstJobDur
}

// runBurst enqueues the burst in one call, with shareq's partitioner or
// (sticky) with a client on franz-go's default partitioner, and waits for
// burstWorkers worker processes to run it.
func runBurst(ctx context.Context, c *cluster, log *slog.Logger, sticky bool) (burstRun, error) {
	what := "burst-spread"
	run := burstRun{Variant: fmt.Sprintf("enqueue.Partitioner, %d workers × concurrency=%d", burstWorkers, burstConcurrency)}
	if sticky {
		what = "burst-sticky"
		run.Variant = fmt.Sprintf("franz-go default partitioner, %d workers × concurrency=%d", burstWorkers, burstConcurrency)
	}
	topic, err := c.topic(ctx, what, burstPartitions)
	if err != nil {
		return run, err
	}
	group, err := c.shareGroup(ctx, what)
	if err != nil {
		return run, err
	}
	var opts []kgo.Opt
	if !sticky {
		opts = enqueue.ProducerOpts()
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, opts...)...)
	if err != nil {
		return run, err
	}
	defer prod.Close()

	comp := newCompletions(burstJobs)
	procs, err := startBurstWorkers(c.seeds, group, topic, comp)
	if err != nil {
		return run, err
	}
	stop := func() error { return procs.stop(log) }
	if err := c.waitShareMembers(ctx, group, burstWorkers); err != nil {
		return run, errors.Join(err, stop())
	}

	recs := make([]*kgo.Record, burstJobs)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: encodeJob(i, burstJobDur)}
	}
	comp.start()
	if sticky {
		// enqueue.New refuses this client (ErrStickyPartitioner); one
		// ProduceSync of every record is what EnqueueMany would do.
		err = produceWith(ctx, prod, recs)
	} else {
		err = enqueueBurst(ctx, prod, recs)
	}
	if err != nil {
		return run, errors.Join(err, stop())
	}
	err = waitAll(ctx, comp, burstTimeout)
	err = errors.Join(err, stop())
	_, run.Makespan, run.Dups = comp.result()
	run.PerWorker, run.Partitions = procs.counts()
	return run, err
}

// enqueueBurst enqueues the jobs of recs in one EnqueueMany call.
func enqueueBurst(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	q, err := enqueue.New(cl)
	if err != nil {
		return err
	}
	jobs := make([]enqueue.Job, len(recs))
	for i, r := range recs {
		jobs[i] = enqueue.NewJob(r.Topic, enqueue.Raw(r.Value))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = q.EnqueueMany(ctx, jobs...)
	return err
}

// burstProcs are the worker processes of one burst run.
type burstProcs struct {
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
	errs  []*bytes.Buffer // each process's stderr
	wg    sync.WaitGroup  // the stdout readers

	mu    sync.Mutex
	ran   []int          // jobs run per process
	parts map[int32]bool // partitions the jobs came from
}

// startBurstWorkers starts burstWorkers processes of this executable as
// burst workers. Each reports a finished job as a line "done INDEX
// PARTITION" on its stdout, and stops when its stdin is closed.
func startBurstWorkers(seeds []string, group, topic string, comp *completions) (*burstProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ps := &burstProcs{ran: make([]int, burstWorkers), parts: map[int32]bool{}}
	for i := range burstWorkers {
		cmd := exec.Command(exe, burstWorkerCmd, "-brokers", strings.Join(seeds, ","), "-group", group,
			"-topic", topic, "-concurrency", strconv.Itoa(burstConcurrency))
		in, err := cmd.StdinPipe()
		if err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		stderr := new(bytes.Buffer)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
		ps.cmds, ps.stdin, ps.errs = append(ps.cmds, cmd), append(ps.stdin, in), append(ps.errs, stderr)
		ps.wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var idx int
				var part int32
				if _, err := fmt.Sscanf(sc.Text(), "done %d %d", &idx, &part); err != nil {
					continue
				}
				comp.done(idx)
				ps.mu.Lock()
				ps.ran[i]++
				ps.parts[part] = true
				ps.mu.Unlock()
			}
		})
	}
	return ps, nil
}

// stop closes every worker's stdin, waits for the processes (killing one
// that has not exited after burstStopTimeout) and logs what a failing one
// wrote to stderr.
func (ps *burstProcs) stop(log *slog.Logger) error {
	for _, in := range ps.stdin {
		_ = in.Close()
	}
	var errs []error
	for i, cmd := range ps.cmds {
		t := time.AfterFunc(burstStopTimeout, func() { _ = cmd.Process.Kill() })
		err := cmd.Wait()
		t.Stop()
		if err != nil {
			errs = append(errs, fmt.Errorf("burst worker %d: %w: %s", i, err, strings.TrimSpace(ps.errs[i].String())))
		} else if log != nil && ps.errs[i].Len() > 0 {
			log.Warn("burst worker logged", "worker", i, "stderr", ps.errs[i].String())
		}
	}
	ps.wg.Wait()
	return errors.Join(errs...)
}

// burstStopTimeout bounds a burst worker's graceful stop.
const burstStopTimeout = 15 * time.Second

// counts returns the jobs each process ran and the number of partitions
// the jobs came from.
func (ps *burstProcs) counts() ([]int, int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.ran), len(ps.parts)
}

// runBurstWorker is a burst worker process: a shareq worker on topic
// that sleeps each job's duration and then writes "done INDEX PARTITION"
// to stdout. It stops gracefully when stdin reaches EOF (the bench closes
// it) or ctx ends.
func runBurstWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(burstWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "seed brokers, comma-separated")
	group := fs.String("group", "", "share group")
	topic := fs.String("topic", "", "job topic")
	conc := fs.Int("concurrency", burstConcurrency, "handler slots")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *group == "" || *topic == "" {
		return errors.New("burst-worker: -brokers, -group and -topic are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The reader of stdin ends with the process: a read cannot be
	// interrupted, and EOF is the bench's stop signal.
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	var mu sync.Mutex
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		idx, d, err := decodeJob(job.Value)
		if err != nil {
			return handler.Permanent(err)
		}
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		_, err = fmt.Fprintf(stdout, "done %d %d\n", idx, job.Partition)
		return err
	})
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(worker.Brokers(strings.Split(*brokers, ",")...), worker.Group(*group), worker.Handle(*topic, h),
		worker.Concurrency(*conc), worker.ShutdownTimeout(5*time.Second), worker.Logger(log))
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
