package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// renewResult holds the figures of the long-job scenario.
type renewResult struct {
	Jobs          int
	Concurrency   int // handler slots of each worker
	Lock, JobDur  time.Duration
	Executions    int // handler runs started
	Duplicates    int // runs beyond one per job
	Accepted      int
	Renewals      int
	RenewErrors   int
	MinPerJob     int
	MaxPerJob     int
	Makespan      time.Duration
	ExpectedRenew int // renewals per job at the default margin
}

// renewObserver counts renewals and outcomes per job.
type renewObserver struct {
	worker.NopObserver // the events it does not count

	mu       sync.Mutex
	renewals map[string]int
	errs     int
	accepted int
	released int
}

func (o *renewObserver) JobFinished(_ *handler.Job, r worker.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.Ack == worker.AckAccept {
		o.accepted++
	} else {
		o.released++
	}
}
func (o *renewObserver) LockRenewed(job *handler.Job, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.errs++
		return
	}
	o.renewals[job.ID()]++
}

var _ worker.Observer = (*renewObserver)(nil)

// runRenew runs jobs three lock durations long on two competing workers
// of one group and counts executions and renewals.
func runRenew(ctx context.Context, c *cluster, log *slog.Logger, jobs int) (renewResult, error) {
	res := renewResult{Jobs: jobs, Lock: c.lock, JobDur: 3 * c.lock}
	// The worker renews at half the lock duration (RenewMargin default).
	res.ExpectedRenew = int(res.JobDur/(c.lock/2)) - 1
	topic, err := c.topic(ctx, "renew", 6)
	if err != nil {
		return res, err
	}
	group, err := c.shareGroup(ctx, "renew")
	if err != nil {
		return res, err
	}
	obs := &renewObserver{renewals: map[string]int{}}
	var mu sync.Mutex
	runs := map[string]int{}
	comp := newCompletions(jobs)
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		runs[job.ID()]++
		mu.Unlock()
		if err := sleepCtx(ctx, res.JobDur); err != nil {
			return err
		}
		comp.done(int(job.Offset)<<8 | int(job.Partition))
		return nil
	})
	// Each worker has a handler slot per job: a share group serves a
	// partition's records only to the members assigned that partition, so
	// whichever partitions a worker gets, all their jobs can run at once
	// (the ideal makespan is one job length).
	per := jobs
	res.Concurrency = per
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 2)
	for range 2 {
		w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group), worker.Handle(topic, h),
			worker.Concurrency(per), worker.Observers(obs),
			worker.ShutdownTimeout(5*time.Second), worker.Logger(log))
		if err != nil {
			return res, err
		}
		go func() { ran <- w.Run(wctx) }()
	}
	stop := func() error { cancel(); return errors.Join(<-ran, <-ran) }
	if err := c.waitShareMembers(ctx, group, 2); err != nil {
		return res, errors.Join(err, stop())
	}
	recs := make([]*kgo.Record, jobs)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 6), Value: []byte(fmt.Sprint(i))}
	}
	prod, err := c.manualProducer()
	if err != nil {
		return res, errors.Join(err, stop())
	}
	defer prod.Close()
	comp.start()
	if err := produceWith(ctx, prod, recs); err != nil {
		return res, errors.Join(err, stop())
	}
	err = waitAll(ctx, comp, 3*res.JobDur+time.Minute)
	// Let the last acks and any redelivery show before stopping.
	time.Sleep(c.lock)
	err = errors.Join(err, stop())
	_, res.Makespan, _ = comp.result()

	mu.Lock()
	for _, n := range runs {
		res.Executions += n
		res.Duplicates += n - 1
	}
	mu.Unlock()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	res.Accepted, res.RenewErrors = obs.accepted, obs.errs
	res.MinPerJob = -1
	for id := range runs {
		n := obs.renewals[id]
		res.Renewals += n
		if res.MinPerJob < 0 || n < res.MinPerJob {
			res.MinPerJob = n
		}
		res.MaxPerJob = max(res.MaxPerJob, n)
	}
	return res, err
}
