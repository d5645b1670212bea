package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

const (
	// latencyConcurrency is the worker's Concurrency in the latency
	// scenario: the head-of-line scenario's.
	latencyConcurrency = 24
	// latencyPartitions is the topic's partition count.
	latencyPartitions = 6
)

// latencyRates are the produce rates (jobs/s) of the latency scenario.
var latencyRates = []int{100, 1000}

// latencyResult is one produce rate's start latencies.
type latencyResult struct {
	Rate           int
	Jobs           int
	P50, P99, Max  time.Duration
	Late, Produced int // Late: jobs that never started within the timeout
}

// runLatency produces jobs at rate a second for d to a worker that has
// joined and waits for them (an idle worker: nothing else in the topic),
// and measures each job's start latency: from just before its record was
// handed to the producer (the time is in its value) to its handler's
// start. The producer lingers 0 ms, so a record goes out at once.
func runLatency(ctx context.Context, c *cluster, log *slog.Logger, rate int, d time.Duration) (latencyResult, error) {
	res := latencyResult{Rate: rate}
	topic, err := c.topic(ctx, fmt.Sprintf("latency-%d", rate), latencyPartitions)
	if err != nil {
		return res, err
	}
	group, err := c.shareGroup(ctx, fmt.Sprintf("latency-%d", rate))
	if err != nil {
		return res, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ProducerLinger(0))
	if err != nil {
		return res, err
	}
	defer prod.Close()

	n := int(float64(rate) * d.Seconds())
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	all := make(chan struct{})
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		now := time.Now()
		if len(job.Value) < 8 {
			return handler.Permanent(errors.New("latency: short value"))
		}
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(job.Value)))
		mu.Lock()
		lat = append(lat, now.Sub(sent))
		if len(lat) == n {
			close(all)
		}
		mu.Unlock()
		return nil
	})
	w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.Concurrency(latencyConcurrency), worker.ShutdownTimeout(5*time.Second), worker.Logger(log))
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	stop := func() error { cancel(); return <-ran }
	if err := c.waitShareMembers(ctx, group, 1); err != nil {
		return res, errors.Join(err, stop())
	}

	// Paced by the clock, not by a ticker's count: a tick that comes late
	// produces the records due by then.
	var perr error
	var pmu sync.Mutex
	began := time.Now()
	for i := 0; i < n; {
		due := min(n, int(time.Since(began).Seconds()*float64(rate))+1)
		for ; i < due; i++ {
			v := make([]byte, 100)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			prod.Produce(ctx, &kgo.Record{Topic: topic, Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					pmu.Lock()
					perr = errors.Join(perr, err)
					pmu.Unlock()
				}
			})
		}
		next := began.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		time.Sleep(time.Until(next))
	}
	res.Produced = n
	if err := prod.Flush(ctx); err != nil {
		return res, errors.Join(err, stop())
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	err = errors.Join(perr, stop())
	mu.Lock()
	got := slices.Clone(lat)
	mu.Unlock()
	res.Jobs = len(got)
	res.Late = n - len(got)
	if len(got) > 0 {
		slices.Sort(got)
		res.P50 = got[len(got)/2]
		res.P99 = got[min(len(got)-1, len(got)*99/100)]
		res.Max = got[len(got)-1]
	}
	if res.Late > 0 {
		err = errors.Join(err, fmt.Errorf("latency at %d/s: %d of %d jobs did not start within 30 s", rate, res.Late, n))
	}
	return res, err
}
