package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
)

// soakJobs runs the soak's jobs, one at a time (one) or in batches
// (batch). Every kind writes its effect, a row of soak_effects, in the
// claim's transaction; a slow job sleeps past the record lock; a poison
// job fails on every delivery, its effect undone.
type soakJobs struct{ f workerFlags }

// one runs a job behind idempotency.Middleware: its effect first, rolled
// back with its claim when it fails.
func (js soakJobs) one(ctx context.Context, job *handler.Job, p payload) error {
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("soak: no claim transaction"))
	}
	if err := js.webhook(); err != nil {
		return err
	}
	if err := js.effect(ctx, tx, job, p); err != nil {
		return err
	}
	if err := sleepFor(ctx, p.SleepMS); err != nil {
		return err
	}
	if p.Kind == kindPoison {
		return poisonErr(job)
	}
	return nil
}

// batch runs a batch behind idempotency.Batch, in its one claim
// transaction: each job's effect in a savepoint of its own, rolled back
// when the job fails (as the idempotency docs say a batch must), then
// one sleep as long as the batch's slowest job.
func (js soakJobs) batch(ctx context.Context, jobs []*handler.Job) []error {
	errs := make([]error, len(jobs))
	all := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return all(handler.Permanent(errors.New("soak: no claim transaction")))
	}
	if err := js.webhook(); err != nil {
		return all(err)
	}
	longest := 0
	for i, job := range jobs {
		var p payload
		if err := json.Unmarshal(job.Value, &p); err != nil {
			errs[i] = handler.Permanent(fmt.Errorf("soak: payload: %w", err))
			continue
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return all(err)
		}
		if err := js.effect(ctx, sp, job, p); err != nil {
			return all(err) // the transaction is aborted: the batch retries
		}
		if p.Kind == kindPoison {
			errs[i] = poisonErr(job)
			err = sp.Rollback(ctx)
		} else {
			err = sp.Commit(ctx)
		}
		if err != nil {
			return all(err)
		}
		longest = max(longest, p.SleepMS)
	}
	if err := sleepFor(ctx, longest); err != nil {
		return all(err)
	}
	return errs
}

// webhook is the webhook every job calls: down (handler.Unavailable)
// while the driver's flag file exists (the webhook-outage fault).
func (js soakJobs) webhook() error {
	if js.f.webhookFlag == "" {
		return nil
	}
	if _, err := os.Stat(js.f.webhookFlag); err == nil {
		return handler.Unavailable("webhook", errors.New("POST soak webhook: 503 Service Unavailable"))
	}
	return nil
}

// effect writes job's effect row in tx.
func (js soakJobs) effect(ctx context.Context, tx pgx.Tx, job *handler.Job, p payload) error {
	_, err := tx.Exec(ctx,
		"INSERT INTO soak_effects (job_id, kind, worker, pid, delivery, part, off) VALUES ($1, $2, $3, $4, $5, $6, $7)",
		job.ID(), p.Kind, js.f.name, os.Getpid(), job.DeliveryCount, job.Partition, job.Offset)
	return err
}

// sleepFor waits ms milliseconds, or until ctx ends (its cause).
func sleepFor(ctx context.Context, ms int) error {
	if ms <= 0 {
		return nil
	}
	sleepCtx(ctx, time.Duration(ms)*time.Millisecond)
	return context.Cause(ctx) // nil unless ctx ended
}

func poisonErr(job *handler.Job) error {
	return fmt.Errorf("soak: poison job %s fails on every delivery (%s)", job.ID(), poisonSecret)
}

// soakBatch is the batch size of the batch workers: up to 4 jobs a call,
// within the workers' Concurrency.
const soakBatch = 4

// batchSlots has every second worker process of the fleet (w2, w4, ...)
// run batch handlers, with -batch-workers.
func (p *phase) batchSlots() {
	if !p.o.batchWorkers {
		return
	}
	n := strconv.Itoa(min(soakBatch, p.o.concurrency))
	var names []string
	for i, s := range p.fleet.slots {
		if i%2 == 1 {
			s.mode = []string{"-batch", n}
			names = append(names, s.name)
		}
	}
	if len(names) > 0 {
		p.ev.note("batch handlers of up to %s jobs (idempotency.Batch) in %s", n, strings.Join(names, ", "))
	}
}
