package main

// This file is the part to copy with thumbnail.go: the worker that runs
// the Thumbnailer on the topic, inside its middleware. It knows nothing
// about the demo's flags, its broker or how it waits for its jobs; see
// run.go for the wiring.

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/middleware"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// hooks are what watches the worker: its observer, and the hooks of the
// dlq and idempotency middleware, which see what the worker cannot (a job
// parked or skipped as a duplicate is, to the worker, a job that
// succeeded).
type hooks struct {
	observer    observers
	onPark      func(job *handler.Job, reason string)
	onDuplicate func(job *handler.Job, key string)
	// tel, with -otlp, traces every run (its middleware outermost) and
	// the parking of a job.
	tel *shareqotel.Telemetry
}

// newWorker builds the worker: the thumbnail handler on the topic, inside
// its middleware, running concurrency handlers at once. cl produces the
// parked jobs (the application's *kgo.Client); store holds the claims.
func newWorker(brokers []string, concurrency int, cl *kgo.Client, thumbs handler.Handler, store idempotency.Store, log *slog.Logger, h hooks) (*worker.Worker, error) {
	// The middleware around the handler, outermost first:
	//
	//   park     parks a job that failed permanently (a corrupt image) or
	//            on its last delivery in thumbnails.dlq, then accepts it
	//   Logging  logs failures (Warn: will retry, Error: permanent)
	//   Timeout  cancels a handler that runs for more than a minute
	//   claims   runs each job ID to completion at most once, and gives
	//            the handler the claim's transaction
	//
	// The worker recovers a panicking handler innermost, so park sees a
	// panic as a permanent error, with its stack, and parks the job.
	var parker dlq.Producer = cl
	var use []worker.Option
	if h.tel != nil {
		parker = h.tel.Producer(cl)
		use = append(use, worker.Use(h.tel.Middleware()))
	}
	park, err := dlq.Middleware(parker, dlq.OnPark(h.onPark), dlq.Logger(log))
	if err != nil {
		return nil, err
	}
	timeout := middleware.Timeout(time.Minute)
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(h.onDuplicate))
	if err != nil {
		return nil, err
	}
	return worker.New(append(use,
		worker.Brokers(brokers...),
		worker.Group(group),
		worker.Handle(topic, thumbs, park, middleware.Logging(log), timeout, claims),
		// Refuse to start without the topic park writes to, rather than
		// find out at the first failed job.
		worker.RequireTopics(dlqTopic),
		worker.Concurrency(concurrency),
		// A new share group starts at the latest record; this one must
		// also see the jobs produced before it joined.
		worker.AutoOffsetReset("earliest"),
		worker.ShutdownTimeout(10*time.Second),
		worker.Logger(log),
		worker.Observers(h.observer),
	)...)
}
