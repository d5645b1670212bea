package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/middleware"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// run is the whole program: the broker, the topics, the producer and the
// worker, until every job it produced has finished.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	con := newConsole(stderr, cfg.Quiet)
	level := slog.LevelWarn
	if cfg.Quiet {
		level = slog.LevelError
	}
	log := slog.New(slog.NewTextHandler(con, &slog.HandlerOptions{Level: level}))
	sum := &Summary{Topic: topic, DLQTopic: dlqTopic, Group: group, Brokers: strings.Join(cfg.Brokers, ",")}

	// 1. A broker: the one given, or one in this process.
	brokers, stopBroker, err := startBroker(cfg, con, sum)
	if err != nil {
		return err
	}
	defer stopBroker()

	// 2. One client for producing jobs, parking dead letters and creating
	// topics. The worker makes its own client.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	// With -otlp, everything that produces goes through the telemetry's
	// producer: the enqueue's span, the context in the job's headers.
	var producer enqueue.Producer = cl
	var tel *shareqotel.Telemetry
	if cfg.OTLP != "" {
		var where string
		var shutdown func(context.Context) error
		if tel, where, shutdown, err = startTracing(ctx, cfg.OTLP); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				log.Error("exporting the last spans", "error", err)
			}
		}()
		producer = tel.Producer(cl)
		con.printf("tracing: spans of service %q exported over OTLP/HTTP to %s; find them in your trace viewer (a job's \"process %s\" spans link to its \"send %s\")", serviceName, where, topic, topic)
	}
	adm := kadm.NewClient(cl)
	if err := prepareCluster(ctx, adm, con, sum.Embedded); err != nil {
		return err
	}

	// 3. The jobs of this run.
	sum.Run = strconv.FormatInt(time.Now().UnixMilli(), 36)
	var jobs []jobSpec
	if !cfg.WorkOnly {
		jobs = planJobs(sum.Run, cfg.Jobs, cfg.ImageSize)
		if cfg.SlowDelay > 0 {
			for _, j := range jobs {
				if j.demo == "slow" {
					sum.Slow = append(sum.Slow, j.imageID)
				}
			}
			sum.SlowDelay = cfg.SlowDelay
		}
	}
	if cfg.ProduceOnly {
		return produceOnly(ctx, producer, jobs, sum, cfg.JSON, stdout)
	}

	// 4. Where thumbnails and claims go.
	out, err := openOutputs(ctx, cfg, sum)
	if err != nil {
		return err
	}
	defer out.close()
	thumbs := &Thumbnailer{Sizes: thumbnailSizes, Sink: out.sink, SlowDelay: cfg.SlowDelay}

	// 5. Who watches: the tracker follows every job to its final outcome,
	// and so knows when the demo is over; with -metrics-addr, Prometheus
	// metrics too.
	want := len(jobs)
	if cfg.WorkOnly {
		want = 0
		if cfg.JobsSet {
			want = cfg.Jobs
		}
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.jobID
	}
	sum.Expected = want
	tr := newTracker(want, ids)
	hooks := hooks{observer: observers{tr}, onPark: tr.parkedHook, onDuplicate: tr.duplicateHook, tel: tel}
	if tel != nil {
		hooks.observer = append(hooks.observer, tel)
	}
	var ms *metricsServer
	if cfg.MetricsAddr != "" {
		if ms, err = startMetrics(cfg.MetricsAddr, adm, log); err != nil {
			return err
		}
		hooks.observer = append(hooks.observer, ms.m)
		hooks.onDuplicate = func(j *handler.Job, key string) { tr.duplicateHook(j, key); ms.m.Duplicate(j, key) }
		con.printf("serving metrics at http://%s/metrics", ms.ln.Addr())
	}

	// The web console, if its address is free: a demo that cannot
	// serve it runs all the same.
	var wc *webConsole
	if cfg.ConsoleAddr != "" {
		if wc, err = startWebConsole(cfg.ConsoleAddr, cl, log); err != nil {
			log.Warn("not serving the web console", "error", err)
		} else {
			sum.Console = fmt.Sprintf("http://%s/", wc.ln.Addr())
			con.printf("web console at %s (the group, its lag, the parked jobs)", sum.Console)
		}
	}

	// 6. The worker.
	w, err := newWorker(cfg, brokers, cl, thumbs, out.store, log, hooks)
	if err != nil {
		return err
	}

	// 7. Run the worker, the producer, the metrics server and the progress
	// line until every job has finished. Every goroutine started here is
	// waited for before run returns.
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	var wg sync.WaitGroup
	defer wg.Wait()
	workerErr := make(chan error, 1)
	wg.Go(func() { workerErr <- w.Run(wctx) })
	if ms != nil {
		defer ms.stop()
		wg.Go(func() {
			if err := ms.serve(); err != nil {
				log.Error("metrics server", "error", err)
			}
		})
	}
	if wc != nil {
		defer wc.stop()
		wg.Go(func() {
			if err := wc.serve(); err != nil {
				log.Error("web console", "error", err)
			}
		})
	}
	produced := make(chan error, 1)
	if len(jobs) > 0 {
		wg.Go(func() {
			n, err := produce(wctx, producer, topic, jobs)
			sum.Produced = n
			produced <- err
		})
	}
	if cfg.WorkOnly {
		con.printf("working jobs of %s on %s as share group %q; Ctrl-C to stop", topic, sum.Brokers, group)
	}
	stopProgress := make(chan struct{})
	wg.Go(func() { showProgress(con, tr, want, stopProgress) })

	var timeoutC <-chan time.Time
	if cfg.Timeout > 0 && want > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	var runErr error
wait:
	for {
		select {
		case <-tr.Done():
			break wait
		case err := <-produced:
			produced = nil
			if err != nil && ctx.Err() == nil {
				runErr = err
				sum.Incomplete, sum.StopReason = true, "producing failed"
				break wait
			}
		case err := <-workerErr:
			// Run returns before its context is cancelled only when it
			// could not start: a wrong broker, a missing topic.
			workerErr <- err
			if err == nil {
				err = errors.New("worker stopped unexpectedly")
			}
			runErr = err
			sum.Incomplete, sum.StopReason = true, "worker failed"
			break wait
		case <-timeoutC:
			runErr = fmt.Errorf("not every job finished within %v (-timeout)", cfg.Timeout)
			sum.Incomplete, sum.StopReason = true, "timeout"
			break wait
		case <-ctx.Done():
			sum.Incomplete, sum.StopReason = want > 0, "interrupted"
			break wait
		}
	}

	// 8. Stop: cancel the worker's context and wait for Run to return. It
	// lets running handlers finish (up to ShutdownTimeout), acknowledges
	// them, and closes its clients. A demo that stays up (-stay, with its
	// web console) stops its worker only after the summary, when
	// interrupted, so that the console shows the group as it runs.
	close(stopProgress)
	stopAndWait := func() {
		stopWorker()
		err := <-workerErr
		if err != nil && runErr == nil {
			runErr = err
		}
	}
	sum.Staying = cfg.Stay && wc != nil && runErr == nil && ctx.Err() == nil
	if !sum.Staying {
		stopAndWait()
	}
	con.clear()

	// 9. The summary.
	sum.add(tr.snapshot())
	sum.HandlerRuns = thumbs.Runs()
	sum.Images, sum.Thumbnails, sum.Bytes, sum.SavedTwice = out.files.stats()
	if out.pool != nil && len(jobs) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		sum.DBRows, sum.DBJobs, err = countRows(cctx, out.pool, sum.Run)
		cancel()
		if err != nil {
			log.Error("count thumbnail rows", "error", err)
		}
	}
	if cfg.JSON {
		if err := sum.writeJSON(stdout); err != nil && runErr == nil {
			runErr = err
		}
	} else {
		sum.writeText(stdout)
	}

	// 10. Stay up until interrupted (or until the worker fails).
	if sum.Staying {
		select {
		case <-ctx.Done():
		case err := <-workerErr:
			workerErr <- err
		}
		stopAndWait()
	}
	return runErr
}

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
// its middleware.
func newWorker(cfg config, brokers []string, cl *kgo.Client, thumbs handler.Handler, store idempotency.Store, log *slog.Logger, h hooks) (*worker.Worker, error) {
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
		worker.Concurrency(cfg.Concurrency),
		// A new share group starts at the latest record; this one must
		// also see the jobs produced before it joined.
		worker.AutoOffsetReset("earliest"),
		worker.ShutdownTimeout(10*time.Second),
		worker.Logger(log),
		worker.Observers(h.observer),
	)...)
}

// outputs are where a run's results go.
type outputs struct {
	files *memorySink       // thumbnails: files in -out, or memory
	sink  Sink              // what the handler saves to: files, or files and rows
	store idempotency.Store // the claims
	pool  *pgxpool.Pool     // with -database
}

func openOutputs(ctx context.Context, cfg config, sum *Summary) (*outputs, error) {
	dir := cfg.Out
	if cfg.OutTemp {
		var err error
		if dir, err = os.MkdirTemp("", "shareq-thumbnails-"); err != nil {
			return nil, err
		}
	} else if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	sum.OutDir = dir
	out := &outputs{files: newMemorySink(dir)}
	if cfg.DatabaseURL == "" {
		out.sink, out.store = out.files, idempotency.NewMemoryStore()
		sum.Store = "memory"
		return out, nil
	}
	pool, store, err := openDatabase(ctx, cfg.DatabaseURL, cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	out.pool, out.store, out.sink = pool, store, &pgSink{files: out.files}
	sum.Store = "postgres"
	return out, nil
}

func (o *outputs) close() {
	if o.pool != nil {
		o.pool.Close()
	}
}

// produceOnly produces the jobs and reports.
func produceOnly(ctx context.Context, p enqueue.Producer, jobs []jobSpec, sum *Summary, asJSON bool, stdout io.Writer) error {
	start := time.Now()
	n, err := produce(ctx, p, topic, jobs)
	sum.Produced, sum.Elapsed = n, time.Since(start)
	if err != nil {
		return err
	}
	if asJSON {
		return sum.writeJSON(stdout)
	}
	fmt.Fprintf(stdout, "thumbnails: produced %d jobs to %s on %s in %v (run %s)\n",
		n, topic, sum.Brokers, sum.Elapsed.Round(time.Millisecond), sum.Run)
	if len(sum.Slow) > 0 {
		fmt.Fprintf(stdout, "  slow jobs: %s (%v each)\n", strings.Join(sum.Slow, " "), sum.SlowDelay)
	}
	return nil
}
