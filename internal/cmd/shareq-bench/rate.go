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

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// The rate scenario: worker.TopicRate on one topic with a backlog, run by
// 1, 3 and 10 worker processes (this executable, re-executed): the fleet's
// rate against the limit, the most jobs started in any 1 s, and the
// deliveries spent (jobs started on a delivery other than their first).

const (
	rateWorkerCmd  = "rate-worker"
	ratePartitions = 6
	// rateWarm is how long after the first start the measured period
	// begins: every process has joined and taken its share by then.
	rateWarm = 5 * time.Second
	// rateConcurrency is each worker's handler slots: far more than the
	// limit needs, so the limit alone sets the rate.
	rateConcurrency = 50
)

// rateLimits and rateFleets are the limits (jobs a second) and the
// process counts the scenario runs.
var (
	rateLimits = []int{10, 100}
	rateFleets = []int{1, 3, 10}
)

// rateRun is one measurement.
type rateRun struct {
	Limit, Procs int
	Period       time.Duration // the measured period
	Started      int           // jobs started in it
	Rate         float64       // Started ÷ Period
	MaxWindow    int           // the most starts in any 1 s of the whole run, the joins included
	Spent        int           // starts on a delivery other than the first, the whole run
	PerProc      []int         // starts per process, the whole run
}

// runRate runs limit with procs worker processes for period after the
// warm-up.
func runRate(ctx context.Context, c *cluster, log *slog.Logger, limit, procs int, period time.Duration) (rateRun, error) {
	run := rateRun{Limit: limit, Procs: procs, Period: period}
	what := fmt.Sprintf("rate-%d-%d", limit, procs)
	topic, err := c.topic(ctx, what, ratePartitions)
	if err != nil {
		return run, err
	}
	group, err := c.shareGroup(ctx, what)
	if err != nil {
		return run, err
	}
	// A backlog that outlasts the run: the workers never wait for jobs.
	n := int(float64(limit)*(rateWarm+period+10*time.Second).Seconds()) + 100
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))}
	}
	if err := c.produce(ctx, recs); err != nil {
		return run, err
	}
	ps, err := startRateWorkers(c.seeds, group, topic, limit, procs)
	if err != nil {
		return run, err
	}
	first, err := ps.waitFirst(ctx, 60*time.Second)
	if err == nil {
		err = sleepCtx(ctx, time.Until(first.Add(rateWarm+period)))
	}
	err = errors.Join(err, ps.stop(log))
	run.measure(ps, first.Add(rateWarm))
	return run, err
}

// measure fills in the figures from the starts the processes reported;
// the measured period begins at from.
func (run *rateRun) measure(ps *rateProcs, from time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	at := slices.Clone(ps.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	run.Started = countIn(at, from, from.Add(run.Period))
	run.MaxWindow = maxWindow(at, time.Second)
	run.Rate = float64(run.Started) / run.Period.Seconds()
	run.Spent = ps.spent
	run.PerProc = slices.Clone(ps.per)
}

// rateProcs are the worker processes of one rate run and the starts they
// reported.
type rateProcs struct {
	exe   string
	args  []string // a worker process's arguments
	cmds  []*exec.Cmd
	stdin []io.WriteCloser
	errs  []*bytes.Buffer
	wg    sync.WaitGroup // the stdout readers

	mu      sync.Mutex
	at      []time.Time // every start
	per     []int       // starts per process
	firsts  []time.Time // each process's first start
	spent   int         // starts on a delivery other than the first
	started chan struct{}
	once    sync.Once
	killed  int // 1 + the process killed with SIGKILL; 0: none
}

// startRateWorkers starts procs processes of this executable as rate
// workers. Each reports a job's start as "s UNIXNANOS DELIVERY" on its
// stdout, and stops when its stdin is closed.
func startRateWorkers(seeds []string, group, topic string, limit, procs int) (*rateProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ps := &rateProcs{exe: exe, args: []string{rateWorkerCmd, "-brokers", strings.Join(seeds, ","), "-group", group,
		"-topic", topic, "-limit", strconv.Itoa(limit)}, started: make(chan struct{})}
	for range procs {
		if err := ps.add(); err != nil {
			return ps, errors.Join(err, ps.stop(nil))
		}
	}
	return ps, nil
}

// add starts one more worker process.
func (ps *rateProcs) add() error {
	cmd := exec.Command(ps.exe, ps.args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	ps.mu.Lock()
	i := len(ps.cmds)
	ps.cmds, ps.stdin, ps.errs = append(ps.cmds, cmd), append(ps.stdin, in), append(ps.errs, stderr)
	ps.per = append(ps.per, 0)
	ps.firsts = append(ps.firsts, time.Time{})
	ps.mu.Unlock()
	ps.wg.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var nanos int64
			var count int32
			if _, err := fmt.Sscanf(sc.Text(), "s %d %d", &nanos, &count); err != nil {
				continue
			}
			ps.mu.Lock()
			ps.at = append(ps.at, time.Unix(0, nanos))
			if ps.per[i]++; ps.per[i] == 1 {
				ps.firsts[i] = time.Unix(0, nanos)
			}
			if count > 1 {
				ps.spent++
			}
			ps.mu.Unlock()
			ps.once.Do(func() { close(ps.started) })
		}
	})
	return nil
}

// waitFirst waits up to timeout for the first start and returns when it
// was.
func (ps *rateProcs) waitFirst(ctx context.Context, timeout time.Duration) (time.Time, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ps.started:
	case <-t.C:
		return time.Now(), fmt.Errorf("no job started within %v", timeout)
	case <-ctx.Done():
		return time.Now(), ctx.Err()
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.MinFunc(ps.at, func(a, b time.Time) int { return a.Compare(b) }), nil
}

// stop closes every worker's stdin, waits for the processes (killing one
// that has not exited after burstStopTimeout) and logs what they wrote to
// stderr.
func (ps *rateProcs) stop(log *slog.Logger) error {
	for _, in := range ps.stdin {
		_ = in.Close()
	}
	var errs []error
	for i, cmd := range ps.cmds {
		t := time.AfterFunc(burstStopTimeout, func() { _ = cmd.Process.Kill() })
		err := cmd.Wait()
		t.Stop()
		if i == ps.killed-1 {
			continue // SIGKILLed on purpose
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rate worker %d: %w: %s", i, err, strings.TrimSpace(ps.errs[i].String())))
		} else if log != nil && ps.errs[i].Len() > 0 {
			log.Warn("rate worker logged", "worker", i, "stderr", ps.errs[i].String())
		}
	}
	ps.wg.Wait()
	return errors.Join(errs...)
}

// runRateWorker is a rate worker process: a shareq worker on topic with
// worker.TopicRate(topic, limit, time.Second) and a no-op handler, which
// writes "s UNIXNANOS DELIVERY" to stdout as each job starts (the
// worker's JobStarted). It stops gracefully when stdin reaches EOF (the
// bench closes it) or ctx ends.
func runRateWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(rateWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "seed brokers, comma-separated")
	group := fs.String("group", "", "share group")
	topic := fs.String("topic", "", "job topic")
	limit := fs.Int("limit", 10, "jobs a second, for the whole group")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *group == "" || *topic == "" {
		return errors.New(rateWorkerCmd + ": -brokers, -group and -topic are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // EOF on stdin is the bench's stop signal
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(worker.Brokers(strings.Split(*brokers, ",")...), worker.Group(*group),
		worker.Handle(*topic, nop), worker.TopicRate(*topic, *limit, time.Second),
		worker.Concurrency(rateConcurrency), worker.ShutdownTimeout(5*time.Second), worker.Logger(log),
		worker.Observers(&startWriter{w: stdout}))
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// startWriter writes a line to w as each job starts.
type startWriter struct {
	worker.NopObserver
	mu sync.Mutex
	w  io.Writer
}

func (s *startWriter) JobStarted(job *handler.Job) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "s %d %d\n", now, job.DeliveryCount)
}

// rateScenario runs every limit with every process count and adds their
// rows.
func rateScenario(ctx context.Context, c *cluster, log *slog.Logger, period time.Duration,
	add func(scenario, variant, metric string, v float64, unit, note string), progress func(string)) error {
	var errs []error
	for _, limit := range rateLimits {
		for _, procs := range rateFleets {
			progress(fmt.Sprintf("rate: %d jobs/s, %d worker processes, %v", limit, procs, period))
			r, err := runRate(ctx, c, log, limit, procs, period)
			if err != nil {
				errs = append(errs, fmt.Errorf("rate (%d/s, %d processes): %w", limit, procs, err))
			}
			per := make([]string, len(r.PerProc))
			for i, n := range r.PerProc {
				per[i] = strconv.Itoa(n)
			}
			v := fmt.Sprintf("TopicRate %d/s, %d worker processes", limit, procs)
			add("rate", v, "fleet_rate", r.Rate, "jobs/s", fmt.Sprintf("%d starts in %v after a %v warm-up; goal within ±5%% of %d", r.Started, r.Period, rateWarm, limit))
			add("rate", v, "vs_limit", r.Rate/float64(limit), "x", "")
			add("rate", v, "max_1s_window", float64(r.MaxWindow), "jobs", fmt.Sprintf("the whole run, joins included; goal <= %.0f (1.1× the limit)", 1.1*float64(limit)))
			add("rate", v, "deliveries_spent", float64(r.Spent), "count", "starts past the first delivery; must be 0; starts per process "+strings.Join(per, "/"))
			if ctx.Err() != nil {
				return errors.Join(errs...)
			}
		}
	}
	for _, limit := range rateLimits {
		progress(fmt.Sprintf("rate: %d jobs/s, 2 worker processes, a third joins, one is killed", limit))
		r, err := runRateChurn(ctx, c, log, limit)
		if err != nil {
			errs = append(errs, fmt.Errorf("rate churn (%d/s): %w", limit, err))
		}
		v := fmt.Sprintf("TopicRate %d/s, 2 processes, a 3rd joins at %v, one SIGKILLed %v later", limit, rateChurnJoin, rateChurnKill)
		add("rate", v, "max_1s_window", float64(r.MaxWindow), "jobs", fmt.Sprintf("the whole run; goal <= %.0f (1.1× the limit)", 1.1*float64(limit)))
		add("rate", v, "join_wait", r.JoinWait.Seconds(), "s", "the joiner's launch to its first start (process start, Check, join, 2 counts)")
		add("rate", v, "rate_after_kill", r.DuringKil/float64(limit), "x", fmt.Sprintf("the fleet's rate in the 5 s after the SIGKILL, %.1f jobs/s, ÷ the limit", r.DuringKil))
		add("rate", v, "recovered_after", r.Recovered.Seconds(), "s", "from the SIGKILL until 2 s at >= 95% of the limit (the session timeout, 6 s by default, then a count); -1: not within the run")
		per := make([]string, len(r.PerProc))
		for i, n := range r.PerProc {
			per[i] = strconv.Itoa(n)
		}
		add("rate", v, "redelivered", float64(r.Redeliv), "count", "starts past the first delivery: records the killed worker held; starts per process "+strings.Join(per, "/"))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// Churn: rateChurnJoin after the first start a third worker process
// joins the two running; rateChurnKill after it one of the first two is
// killed with SIGKILL; the run ends rateChurnAfter after the kill.
const (
	rateChurnJoin  = 15 * time.Second
	rateChurnKill  = 20 * time.Second
	rateChurnAfter = 25 * time.Second
)

// rateChurn is one churn run's figures.
type rateChurn struct {
	Limit     int
	MaxWindow int           // the most starts in any 1 s of the whole run
	JoinWait  time.Duration // from the third process's launch to its first start
	Redeliv   int           // starts past the first delivery: the killed worker's records
	DuringKil float64       // the fleet's rate in the 5 s after the kill
	Recovered time.Duration // from the kill until 2 s at ≥ 95 % of the limit
	PerProc   []int
}

// runRateChurn runs limit on two worker processes, has a third join and
// kills one of the first two.
func runRateChurn(ctx context.Context, c *cluster, log *slog.Logger, limit int) (rateChurn, error) {
	run := rateChurn{Limit: limit}
	what := fmt.Sprintf("rate-churn-%d", limit)
	topic, err := c.topic(ctx, what, ratePartitions)
	if err != nil {
		return run, err
	}
	group, err := c.shareGroup(ctx, what)
	if err != nil {
		return run, err
	}
	n := int(float64(limit)*(rateChurnJoin+rateChurnKill+rateChurnAfter+20*time.Second).Seconds()) + 100
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))}
	}
	if err := c.produce(ctx, recs); err != nil {
		return run, err
	}
	ps, err := startRateWorkers(c.seeds, group, topic, limit, 2)
	if err != nil {
		return run, err
	}
	first, err := ps.waitFirst(ctx, 60*time.Second)
	var joined, killed time.Time
	if err == nil {
		err = sleepCtx(ctx, time.Until(first.Add(rateChurnJoin)))
	}
	if err == nil {
		joined = time.Now()
		err = ps.add()
	}
	if err == nil {
		err = sleepCtx(ctx, time.Until(joined.Add(rateChurnKill)))
	}
	if err == nil {
		killed = time.Now()
		ps.killed = 1
		err = ps.cmds[0].Process.Kill()
	}
	if err == nil {
		err = sleepCtx(ctx, time.Until(killed.Add(rateChurnAfter)))
	}
	err = errors.Join(err, ps.stop(log))

	ps.mu.Lock()
	defer ps.mu.Unlock()
	at := slices.Clone(ps.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	run.MaxWindow = maxWindow(at, time.Second)
	run.Redeliv, run.PerProc = ps.spent, slices.Clone(ps.per)
	if len(ps.firsts) == 3 && !ps.firsts[2].IsZero() {
		run.JoinWait = ps.firsts[2].Sub(joined)
	}
	if !killed.IsZero() {
		run.DuringKil = float64(countIn(at, killed, killed.Add(5*time.Second))) / 5
		run.Recovered = -1
		for d := time.Duration(0); d < rateChurnAfter-2*time.Second; d += 250 * time.Millisecond {
			from := killed.Add(d)
			if float64(countIn(at, from, from.Add(2*time.Second))) >= 0.95*2*float64(limit) {
				run.Recovered = d
				break
			}
		}
	}
	return run, err
}

// maxWindow is the most of the sorted times at within any window of
// length w.
func maxWindow(at []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i, t := range at {
		for t.Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// countIn is how many of the sorted times at are in [from, to).
func countIn(at []time.Time, from, to time.Time) int {
	cmp := func(a, b time.Time) int { return a.Compare(b) }
	i, _ := slices.BinarySearchFunc(at, from, cmp)
	j, _ := slices.BinarySearchFunc(at, to, cmp)
	return j - i
}
