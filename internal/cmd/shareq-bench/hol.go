package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Head-of-line scenario: the job mix and the worker count.
const (
	holPartitions = 6
	holWorkers    = 24
	holFast       = 2000
	holSlow       = 5
	holFastDur    = 20 * time.Millisecond
	holSlowDur    = 4 * time.Second
	holBucket     = 250 * time.Millisecond
	// holTimeout bounds one run; the classic group takes about 12 s.
	holTimeout = 90 * time.Second
)

// encodeJob and decodeJob carry a job's stream index and duration in a
// record value.
func encodeJob(index int, d time.Duration) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, uint32(index))
	binary.BigEndian.PutUint64(b[4:], uint64(d))
	return b
}

func decodeJob(b []byte) (index int, d time.Duration, err error) {
	if len(b) != 12 {
		return 0, 0, fmt.Errorf("job value: %d bytes, want 12", len(b))
	}
	return int(binary.BigEndian.Uint32(b)), time.Duration(binary.BigEndian.Uint64(b[4:])), nil
}

// completions records when each job of a run finished, from t0.
type completions struct {
	mu    sync.Mutex
	t0    time.Time
	want  int
	seen  map[int]int
	times []time.Duration
	all   chan struct{}
}

func newCompletions(want int) *completions {
	return &completions{want: want, seen: make(map[int]int, want), all: make(chan struct{})}
}

func (c *completions) start() {
	c.mu.Lock()
	c.t0 = time.Now()
	c.mu.Unlock()
}

// done records that job index finished now.
func (c *completions) done(index int) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[index]++
	if c.seen[index] > 1 {
		return // a duplicate execution: counted, not timed
	}
	c.times = append(c.times, now.Sub(c.t0))
	if len(c.times) == c.want {
		close(c.all)
	}
}

// result returns the completion times and the number of duplicate
// executions.
func (c *completions) result() (times []time.Duration, makespan time.Duration, dups int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.seen {
		dups += n - 1
	}
	times = append([]time.Duration(nil), c.times...)
	for _, t := range times {
		makespan = max(makespan, t)
	}
	return times, makespan, dups
}

// holRun is the outcome of one head-of-line run.
type holRun struct {
	Variant  string
	Times    []time.Duration // completion times from t0
	Makespan time.Duration
	Dups     int
}

func holRecords(topic string, jobs []holJob) []*kgo.Record {
	recs := make([]*kgo.Record, len(jobs))
	for i, j := range jobs {
		recs[i] = &kgo.Record{Topic: topic, Partition: j.Partition, Value: encodeJob(j.Index, j.Dur)}
	}
	return recs
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// manualProducer is a client that writes records to the partition they
// name, for the head-of-line layout.
func (c *cluster) manualProducer() (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
}

func produceWith(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// runClassicHOL runs the jobs on a classic consumer group of members
// clients, each processing one record at a time and committing it
// synchronously before the next. Only as many members as partitions get
// work. A job counts as finished when its commit returns.
func runClassicHOL(ctx context.Context, c *cluster, log *slog.Logger, jobs []holJob, members int) (holRun, error) {
	run := holRun{Variant: fmt.Sprintf("classic group members=%d", members)}
	topic, err := c.topic(ctx, "hol-classic", holPartitions)
	if err != nil {
		return run, err
	}
	group := c.classicGroup("hol-classic")
	prod, err := c.manualProducer()
	if err != nil {
		return run, err
	}
	defer prod.Close()

	comp := newCompletions(len(jobs))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var commitErrs sync.Map
	for i := range members {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			cancel()
			wg.Wait()
			return run, err
		}
		wg.Go(func() {
			defer cl.Close()
			for cctx.Err() == nil {
				fs := cl.PollRecords(cctx, 1)
				fs.EachRecord(func(r *kgo.Record) {
					idx, d, err := decodeJob(r.Value)
					if err != nil {
						log.Error("classic: bad record", "error", err)
						return
					}
					if sleepCtx(cctx, d) != nil {
						return
					}
					if err := cl.CommitRecords(cctx, r); err != nil {
						if cctx.Err() == nil {
							commitErrs.Store(i, err)
						}
						return
					}
					comp.done(idx)
				})
			}
		})
	}
	stop := func() { cancel(); wg.Wait() }
	if err := c.waitClassicStable(ctx, group, members, holPartitions, time.Second); err != nil {
		stop()
		return run, err
	}
	comp.start()
	if err := produceWith(ctx, prod, holRecords(topic, jobs)); err != nil {
		stop()
		return run, err
	}
	err = waitAll(ctx, comp, holTimeout)
	stop()
	commitErrs.Range(func(k, v any) bool {
		log.Warn("classic: commit failed", "member", k, "error", v)
		return true
	})
	run.Times, run.Makespan, run.Dups = comp.result()
	return run, err
}

func waitAll(ctx context.Context, comp *completions, timeout time.Duration) error {
	select {
	case <-comp.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		comp.mu.Lock()
		n := len(comp.times)
		comp.mu.Unlock()
		return fmt.Errorf("%w: %d of %d jobs finished in %v", errTimeout, n, comp.want, timeout)
	}
}

// runShareqHOL runs the jobs on a shareq worker of concurrency handler
// slots, waiting up to timeout for them. A job counts as finished when
// its handler returns.
func runShareqHOL(ctx context.Context, c *cluster, log *slog.Logger, jobs []holJob, concurrency int, timeout time.Duration) (holRun, error) {
	run := holRun{Variant: fmt.Sprintf("shareq concurrency=%d", concurrency)}
	topic, err := c.topic(ctx, "hol-shareq", holPartitions)
	if err != nil {
		return run, err
	}
	group, err := c.shareGroup(ctx, "hol-shareq")
	if err != nil {
		return run, err
	}
	prod, err := c.manualProducer()
	if err != nil {
		return run, err
	}
	defer prod.Close()

	comp := newCompletions(len(jobs))
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		idx, d, err := decodeJob(job.Value)
		if err != nil {
			return handler.Permanent(err)
		}
		if err := sleepCtx(ctx, d); err != nil {
			return err
		}
		comp.done(idx)
		return nil
	})
	w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.Concurrency(concurrency), worker.ShutdownTimeout(5*time.Second), worker.Logger(log))
	if err != nil {
		return run, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	stop := func() error { cancel(); return <-ran }

	if err := c.waitShareMembers(ctx, group, 1); err != nil {
		return run, errors.Join(err, stop())
	}
	comp.start()
	if err := produceWith(ctx, prod, holRecords(topic, jobs)); err != nil {
		return run, errors.Join(err, stop())
	}
	err = waitAll(ctx, comp, timeout)
	err = errors.Join(err, stop())
	run.Times, run.Makespan, run.Dups = comp.result()
	return run, err
}

// idealHOL is the list schedule of the jobs on holWorkers machines.
func idealHOL(jobs []holJob) holRun {
	durs := make([]time.Duration, len(jobs))
	for i, j := range jobs {
		durs[i] = j.Dur
	}
	finish, makespan := idealSchedule(durs, holWorkers)
	return holRun{Variant: fmt.Sprintf("ideal list schedule machines=%d", holWorkers), Times: finish, Makespan: makespan}
}
