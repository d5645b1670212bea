package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/procstat"
	"github.com/shareq/shareq/worker"
)

// overheadConcurrency are the worker's Concurrency settings the no-op
// scenario measures, each against the raw loops of the same run. Each
// is at most a twentieth of the -quick record count (see
// TestOverheadRecordsOutnumberSlots), so no point can hold enough of
// the topic at once to hide its steady rate.
var overheadConcurrency = []int{1, 24, 100, 1000}

// sweepPoint is one measured Concurrency setting of the no-op scenario.
type sweepPoint struct {
	Concurrency int
	Rate        float64 // jobs/s
	Done        int
	CPU         time.Duration // the process's CPU time per job while it ran (selfCPU)
	BrokerCPU   time.Duration // the broker process's, with -broker-pid
	// Member is the worker's member's last snapshot: its fetches, records
	// per fetch and fetch round trip.
	Member worker.MemberStats
}

// fetchMeter keeps the last member snapshot a worker reported.
type fetchMeter struct {
	worker.NopObserver
	mu   sync.Mutex
	last worker.MemberStats
}

func (f *fetchMeter) MemberStats(s worker.MemberStats) {
	f.mu.Lock()
	f.last = s
	f.mu.Unlock()
}

// overheadResult holds the figures of the overhead scenario.
type overheadResult struct {
	RawShare, RawGroup float64       // jobs/s
	RawShareCPU        time.Duration // CPU time per job of the raw share loop
	RawShareBrokerCPU  time.Duration // the broker's, with -broker-pid
	RawShareN          int
	RawGroupN          int
	Sweep              []sweepPoint
}

// rateMeter measures a consumer's steady rate. The span starts at an
// explicit begin (a consumer group's assignment) or else at the first
// delivery, whose records are then not counted: a first poll can return
// a large part of the topic at once, and its wait includes joining the
// group. After a warm-up the rate is taken from the warm-up mark instead,
// so consumers that take a while to reach full speed do not weigh on it.
type rateMeter struct {
	n      atomic.Int64
	begun  atomic.Bool // set under mu; add reads it without
	mu     sync.Mutex
	t0     time.Time
	n0     int64
	began  chan struct{}
	closed sync.Once
}

func newRateMeter() *rateMeter { return &rateMeter{began: make(chan struct{})} }

// begin starts the span now, with nothing counted yet.
func (m *rateMeter) begin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.begun.Load() {
		m.t0, m.n0 = time.Now(), m.n.Load()
		m.begun.Store(true)
		m.closed.Do(func() { close(m.began) })
	}
}

// add counts k records and returns the total. Once the span has begun
// it takes no lock: shareq's handlers call it once per job, from up to
// a thousand goroutines, and a contended lock there would be the
// benchmark's cost, not the worker's.
func (m *rateMeter) add(k int) int64 {
	n := m.n.Add(int64(k))
	if m.begun.Load() {
		return n
	}
	m.mu.Lock()
	if !m.begun.Load() {
		m.t0, m.n0 = time.Now(), n
		m.begun.Store(true)
		m.closed.Do(func() { close(m.began) })
	}
	m.mu.Unlock()
	return n
}

// measure waits for the span to begin (up to a minute), then until all
// is closed or limit has passed since the beginning, and returns the rate
// and the total count.
func (m *rateMeter) measure(ctx context.Context, limit, warm time.Duration, all <-chan struct{}) (float64, int, error) {
	select {
	case <-m.began:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(time.Minute):
		return 0, 0, fmt.Errorf("%w: nothing consumed in a minute", errTimeout)
	}
	m.mu.Lock()
	t0, n0 := m.t0, m.n0
	m.mu.Unlock()
	var warmN int64 = -1
	var warmAt time.Time
	warmT := time.NewTimer(time.Until(t0.Add(warm)))
	defer warmT.Stop()
	end := time.NewTimer(time.Until(t0.Add(limit)))
	defer end.Stop()
wait:
	for {
		select {
		case <-warmT.C:
			warmN, warmAt = m.n.Load(), time.Now()
		case <-all:
			break wait
		case <-end.C:
			break wait
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	n, now := m.n.Load(), time.Now()
	if warmN >= 0 && now.Sub(warmAt) >= limit/4 && n > warmN {
		return float64(n-warmN) / now.Sub(warmAt).Seconds(), int(n), nil
	}
	if n <= n0 {
		return 0, int(n), fmt.Errorf("%w: everything arrived in the first poll; use more records", errTimeout)
	}
	return float64(n-n0) / now.Sub(t0).Seconds(), int(n), nil
}

// overheadOpts are the overhead scenario's settings.
type overheadOpts struct {
	partitions int32 // of the scenario's topic
	// batchBytes bounds the producer batches the records are written in;
	// 0: the bench's producer's (up to 1 MiB).
	batchBytes int32
	// profileDir, when set, is where each shareq point writes a CPU and
	// an allocation profile (startProfile).
	profileDir string
	// brokerPID, when not 0, is the broker process, whose CPU time per
	// job is measured too.
	brokerPID int
}

// runOverhead produces records no-op jobs of 100 bytes to a topic and
// consumes them with a raw share loop, a raw
// consumer group and a shareq worker at each of overheadConcurrency, each
// in its own group, each for at most limit, as o says.
func runOverhead(ctx context.Context, c *cluster, log *slog.Logger, o overheadOpts, records int, limit time.Duration, progress func(string)) (overheadResult, error) {
	var res overheadResult
	topic, err := c.topic(ctx, "noop", o.partitions)
	if err != nil {
		return res, err
	}
	value := make([]byte, 100)
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: value}
	}
	if err := c.produceBatched(ctx, recs, o.batchBytes); err != nil {
		return res, err
	}
	warm := limit / 8

	progress("raw share loop")
	cpu, bcpu, err := cpuPerJob(o.brokerPID, func() (int, error) {
		var err error
		res.RawShare, res.RawShareN, err = rawShareLoop(ctx, c, topic, records, limit, warm)
		return res.RawShareN, err
	})
	if err != nil {
		return res, fmt.Errorf("raw share loop: %w", err)
	}
	res.RawShareCPU, res.RawShareBrokerCPU = cpu, bcpu
	progress("raw consumer group")
	res.RawGroup, res.RawGroupN, err = rawGroupLoop(ctx, c, topic, records, limit, warm)
	if err != nil {
		return res, fmt.Errorf("raw consumer group: %w", err)
	}
	for _, conc := range overheadConcurrency {
		progress(fmt.Sprintf("shareq concurrency=%d", conc))
		p := sweepPoint{Concurrency: conc}
		stop, err := startProfile(o.profileDir, fmt.Sprintf("overhead-c%d", conc))
		if err != nil {
			return res, err
		}
		p.CPU, p.BrokerCPU, err = cpuPerJob(o.brokerPID, func() (int, error) {
			var err error
			p.Rate, p.Done, p.Member, err = shareqNoop(ctx, c, log, topic, conc, records, limit, warm)
			return p.Done, err
		})
		if perr := stop(); err == nil {
			err = perr
		}
		if err != nil {
			return res, fmt.Errorf("shareq concurrency=%d: %w", conc, err)
		}
		res.Sweep = append(res.Sweep, p)
	}
	return res, nil
}

// rawShareLoop is franz-go's share consumer as its docs show it: one
// client, default batches with prefetch, accept every record.
func rawShareLoop(ctx context.Context, c *cluster, topic string, records int, limit, warm time.Duration) (float64, int, error) {
	group, err := c.shareGroup(ctx, "raw-share")
	if err != nil {
		return 0, 0, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	m := newRateMeter()
	all := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for lctx.Err() == nil {
			fs := cl.PollFetches(lctx)
			k := 0
			fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckAccept); k++ })
			if k > 0 && m.add(k) >= int64(records) {
				close(all)
				return
			}
		}
	})
	rate, n, err := m.measure(ctx, limit, warm, all)
	cancel()
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	return rate, n, errors.Join(err, cl.FlushAcks(fctx))
}

// rawGroupLoop is a classic consumer group member that does nothing per
// record and commits once at the end: the fastest way Kafka hands out
// records, for scale.
func rawGroupLoop(ctx context.Context, c *cluster, topic string, records int, limit, warm time.Duration) (float64, int, error) {
	group := c.classicGroup("raw-group")
	m := newRateMeter()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { m.begin() }))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	all := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var commitErr error
	wg.Go(func() {
		for lctx.Err() == nil {
			fs := cl.PollFetches(lctx)
			if k := fs.NumRecords(); k > 0 && m.add(k) >= int64(records) {
				commitErr = cl.CommitUncommittedOffsets(lctx)
				close(all)
				return
			}
		}
	})
	rate, n, err := m.measure(ctx, limit, warm, all)
	cancel()
	wg.Wait()
	return rate, n, errors.Join(err, commitErr)
}

// cpuNote explains the overhead scenario's cpu_per_job rows.
const cpuNote = "process CPU (getrusage) per job over the whole run, start included; with kfake the broker's too"

// brokerCPUNote explains the overhead scenario's broker_cpu_per_job rows.
const brokerCPUNote = "the broker process's CPU (/proc, -broker-pid) per job over the whole run"

// cpuPerJob runs f, which returns how many jobs it ran, and returns the
// CPU time this process spent per job meanwhile (selfCPU: every thread,
// so with kfake the broker's too), its start and stop included, and with
// a brokerPID (not 0) that process's too.
func cpuPerJob(brokerPID int, f func() (int, error)) (self, broker time.Duration, err error) {
	before, err := selfCPU()
	if err != nil {
		return 0, 0, err
	}
	var bBefore time.Duration
	if brokerPID != 0 {
		if bBefore, err = procstat.CPU(brokerPID); err != nil {
			return 0, 0, fmt.Errorf("-broker-pid: %w", err)
		}
	}
	n, err := f()
	after, cerr := selfCPU()
	if err != nil || cerr != nil || n == 0 {
		return 0, 0, errors.Join(err, cerr)
	}
	if brokerPID != 0 {
		bAfter, err := procstat.CPU(brokerPID)
		if err != nil {
			return 0, 0, fmt.Errorf("-broker-pid: %w", err)
		}
		broker = (bAfter - bBefore) / time.Duration(n)
	}
	return (after - before) / time.Duration(n), broker, nil
}

// startProfile starts a CPU profile to dir/name.pprof and returns its
// stop, which also writes the allocations of the span, as a base and a
// final profile (name.allocs-base.pprof and name.allocs.pprof; read them
// with go tool pprof -sample_index=alloc_space -diff_base); with no dir
// it does nothing.
func startProfile(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	writeAllocs := func(suffix string) error {
		f, err := os.Create(filepath.Join(dir, name+suffix))
		if err != nil {
			return err
		}
		return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
	}
	if err := writeAllocs(".allocs-base.pprof"); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(f.Close(), writeAllocs(".allocs.pprof"))
	}, nil
}

// shareqNoop runs a shareq worker of concurrency handler slots with a
// no-op handler on the topic, and returns its member's last snapshot too.
func shareqNoop(ctx context.Context, c *cluster, log *slog.Logger, topic string, concurrency, records int, limit, warm time.Duration) (float64, int, worker.MemberStats, error) {
	var st worker.MemberStats
	group, err := c.shareGroup(ctx, fmt.Sprintf("noop-c%d", concurrency))
	if err != nil {
		return 0, 0, st, err
	}
	m := newRateMeter()
	all := make(chan struct{})
	var closeOnce sync.Once
	nop := handler.Func(func(context.Context, *handler.Job) error {
		if m.add(1) == int64(records) {
			closeOnce.Do(func() { close(all) })
		}
		return nil
	})
	fm := &fetchMeter{}
	w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group), worker.Handle(topic, nop),
		worker.Concurrency(concurrency), worker.ShutdownTimeout(5*time.Second), worker.Logger(log), worker.Observers(fm))
	if err != nil {
		return 0, 0, st, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	rate, n, err := m.measure(ctx, limit, warm, all)
	cancel()
	err = errors.Join(err, <-ran)
	fm.mu.Lock()
	st = fm.last // Run reports a last snapshot as it returns
	fm.mu.Unlock()
	return rate, n, st, err
}
