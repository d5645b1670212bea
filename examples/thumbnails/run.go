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

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// run is the whole program: the broker, the topics, the producer and the
// worker, until every job it produced has finished.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	d := newDemo(cfg, stdout, stderr)

	// 1. A broker: the one given, or one in this process.
	brokers, stopBroker, err := startBroker(cfg, d.con, d.sum)
	if err != nil {
		return err
	}
	defer stopBroker()

	// 2. One client for producing jobs, parking dead letters and creating
	// topics (the worker makes its own client), and the topics.
	kc, err := newKafkaClient(ctx, cfg.OTLP, brokers, d.con)
	if err != nil {
		return err
	}
	defer kc.close(ctx, d.log)
	d.producer = kc.producer
	if err := prepareCluster(ctx, kc.adm, d.con, d.sum.Embedded); err != nil {
		return err
	}

	// 3. The jobs of this run.
	d.plan()
	if cfg.ProduceOnly {
		return produceOnly(ctx, d.producer, d.jobs, d.sum, cfg.JSON, stdout)
	}

	// 4. Where thumbnails and claims go.
	if d.out, err = openOutputs(ctx, cfg, d.sum); err != nil {
		return err
	}
	defer d.out.close()
	d.thumbs = &Thumbnailer{Sizes: thumbnailSizes, Sink: d.out.sink, SlowDelay: cfg.SlowDelay}

	// 5. Who watches: the tracker, metrics, the web console.
	h, err := d.watch(kc.tel, kc.adm)
	if err != nil {
		return err
	}
	d.openWebConsole(kc.cl)

	// 6. The worker (worker.go).
	if d.w, err = newWorker(brokers, cfg.Concurrency, kc.cl, d.thumbs, d.out.store, d.log, h); err != nil {
		return err
	}

	// 7.-10. Work the jobs off, and report.
	return d.work(ctx)
}

// demo is one run of the program: its settings, where it writes, and the
// parts that run sets up, step by step, for the worker's phase (work).
// run's goroutine sets its fields before work starts any goroutine; those
// only read them (the producing goroutine reports its count on a
// channel, and run's goroutine writes it into the summary).
type demo struct {
	cfg    config
	con    *console     // stderr: the progress line, log lines above it
	log    *slog.Logger // writes to con
	sum    *Summary     // what the run did, printed at the end
	stdout io.Writer    // where the summary goes

	// Set by run.
	producer enqueue.Producer // produces the jobs
	jobs     []jobSpec        // the jobs to produce; none with -work-only
	out      *outputs         // where thumbnails and claims go
	thumbs   *Thumbnailer     // the handler
	tr       *tracker         // follows every job to its final outcome
	want     int              // jobs to wait for; 0: until interrupted
	ms       *metricsServer   // with -metrics-addr
	wc       *webConsole      // with -console-addr, when its address was free
	w        *worker.Worker
}

// newDemo returns a run's demo with its console, its logger (Warn and up;
// Error and up with -quiet) and its summary.
func newDemo(cfg config, stdout, stderr io.Writer) *demo {
	con := newConsole(stderr, cfg.Quiet)
	level := slog.LevelWarn
	if cfg.Quiet {
		level = slog.LevelError
	}
	return &demo{
		cfg:    cfg,
		con:    con,
		log:    slog.New(slog.NewTextHandler(con, &slog.HandlerOptions{Level: level})),
		sum:    &Summary{Topic: topic, DLQTopic: dlqTopic, Group: group, Brokers: strings.Join(cfg.Brokers, ",")},
		stdout: stdout,
	}
}

// kafkaClient is the demo's own Kafka client: it produces the jobs,
// parks dead letters and creates topics. The worker makes its own.
type kafkaClient struct {
	cl       *kgo.Client
	adm      *kadm.Client
	producer enqueue.Producer      // cl; with -otlp, cl through the telemetry's producer
	tel      *shareqotel.Telemetry // with -otlp; else nil
	// shutdownTracing exports the last spans; nil without -otlp.
	shutdownTracing func(context.Context) error
}

// newKafkaClient connects the demo's client to brokers and, with an OTLP
// endpoint, starts tracing: then everything that produces goes through
// the telemetry's producer (the enqueue's span, the context in the job's
// headers).
func newKafkaClient(ctx context.Context, otlp string, brokers []string, con *console) (*kafkaClient, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	kc := &kafkaClient{cl: cl, adm: kadm.NewClient(cl), producer: cl}
	if otlp == "" {
		return kc, nil
	}
	tel, where, shutdown, err := startTracing(ctx, otlp)
	if err != nil {
		cl.Close()
		return nil, err
	}
	kc.tel, kc.shutdownTracing, kc.producer = tel, shutdown, tel.Producer(cl)
	con.printf("tracing: spans of service %q exported over OTLP/HTTP to %s; find them in your trace viewer (a job's \"process %s\" spans link to its \"send %s\")", serviceName, where, topic, topic)
	return kc, nil
}

// close exports the last spans, with -otlp, and closes the client.
func (kc *kafkaClient) close(ctx context.Context, log *slog.Logger) {
	if kc.shutdownTracing != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := kc.shutdownTracing(sctx); err != nil {
			log.Error("exporting the last spans", "error", err)
		}
	}
	kc.cl.Close()
}

// plan names the run and plans its jobs (none with -work-only), and notes
// the slow ones in the summary.
func (d *demo) plan() {
	d.sum.Run = strconv.FormatInt(time.Now().UnixMilli(), 36)
	if d.cfg.WorkOnly {
		return
	}
	d.jobs = planJobs(d.sum.Run, d.cfg.Jobs, d.cfg.ImageSize)
	if d.cfg.SlowDelay > 0 {
		for _, j := range d.jobs {
			if j.demo == "slow" {
				d.sum.Slow = append(d.sum.Slow, j.imageID)
			}
		}
		d.sum.SlowDelay = d.cfg.SlowDelay
	}
}

// watch sets up what watches the worker: the tracker follows every job to
// its final outcome, and so knows when the demo is over; with -otlp, the
// telemetry tel; with -metrics-addr, Prometheus metrics (not yet served:
// see serve). It returns the hooks to build the worker with.
func (d *demo) watch(tel *shareqotel.Telemetry, adm *kadm.Client) (hooks, error) {
	d.want = len(d.jobs)
	if d.cfg.WorkOnly {
		d.want = 0
		if d.cfg.JobsSet {
			d.want = d.cfg.Jobs
		}
	}
	ids := make([]string, len(d.jobs))
	for i, j := range d.jobs {
		ids[i] = j.jobID
	}
	d.sum.Expected = d.want
	tr := newTracker(d.want, ids)
	d.tr = tr
	h := hooks{observer: observers{tr}, onPark: tr.parkedHook, onDuplicate: tr.duplicateHook, tel: tel}
	if tel != nil {
		h.observer = append(h.observer, tel)
	}
	if d.cfg.MetricsAddr == "" {
		return h, nil
	}
	ms, err := startMetrics(d.cfg.MetricsAddr, adm, d.log)
	if err != nil {
		return h, err
	}
	d.ms = ms
	h.observer = append(h.observer, ms.m)
	h.onDuplicate = func(j *handler.Job, key string) { tr.duplicateHook(j, key); ms.m.Duplicate(j, key) }
	d.con.printf("serving metrics at http://%s/metrics", ms.ln.Addr())
	return h, nil
}

// openWebConsole listens for the web console at -console-addr, if that
// address is free: a demo that cannot serve it runs all the same. It is
// served from serve on.
func (d *demo) openWebConsole(cl *kgo.Client) {
	if d.cfg.ConsoleAddr == "" {
		return
	}
	wc, err := startWebConsole(d.cfg.ConsoleAddr, cl, d.log)
	if err != nil {
		d.log.Warn("not serving the web console", "error", err)
		return
	}
	d.wc = wc
	d.sum.Console = fmt.Sprintf("http://%s/", wc.ln.Addr())
	d.con.printf("web console at %s (the group, its lag, the parked jobs)", d.sum.Console)
}

// work runs the worker, the producer, the metrics server, the web console
// and the progress line until every job has finished (or the run stops
// early: see waitForJobs), stops the worker and prints the summary. With
// -stay it prints the summary first and keeps the worker and the web
// console up until interrupted. Every goroutine work starts is owned by
// its wg and waited for before it returns.
func (d *demo) work(ctx context.Context) error {
	// 7. Run them all until every job has finished.
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	var wg sync.WaitGroup
	defer wg.Wait()
	workerErr := make(chan error, 1)
	wg.Go(func() { workerErr <- d.w.Run(wctx) })
	stopServing := d.serve(&wg)
	defer stopServing()
	produced := d.startProducing(wctx, &wg)
	if d.cfg.WorkOnly {
		d.con.printf("working jobs of %s on %s as share group %q; Ctrl-C to stop", topic, d.sum.Brokers, group)
	}
	stopProgress := make(chan struct{})
	wg.Go(func() { showProgress(d.con, d.tr, d.want, stopProgress) })
	runErr := d.waitForJobs(ctx, &produced, workerErr)

	// 8. Stop: cancel the worker's context and wait for Run to return. It
	// lets running handlers finish (up to ShutdownTimeout), acknowledges
	// them, and closes its clients. A demo that stays up (-stay, with its
	// web console) stops its worker only after the summary, when
	// interrupted, so that the console shows the group as it runs.
	close(stopProgress)
	stopAndWait := func() {
		stopWorker()
		if err := <-workerErr; err != nil && runErr == nil {
			runErr = err
		}
	}
	d.sum.Staying = d.cfg.Stay && d.wc != nil && runErr == nil && ctx.Err() == nil
	if !d.sum.Staying {
		stopAndWait()
		d.countProduced(produced) // stopped with the worker's context, if not before
	}
	d.con.clear()

	// 9. The summary.
	if err := d.report(ctx); err != nil && runErr == nil {
		runErr = err
	}

	// 10. Stay up until interrupted (or until the worker fails).
	if d.sum.Staying {
		d.stay(ctx, workerErr)
		stopAndWait()
	}
	return runErr
}

// serve serves the metrics and the web console, those the run has, in
// goroutines of wg, and returns what stops them; wg's owner waits for
// them after.
func (d *demo) serve(wg *sync.WaitGroup) (stop func()) {
	if d.ms != nil {
		wg.Go(func() {
			if err := d.ms.serve(); err != nil {
				d.log.Error("metrics server", "error", err)
			}
		})
	}
	if d.wc != nil {
		wg.Go(func() {
			if err := d.wc.serve(); err != nil {
				d.log.Error("web console", "error", err)
			}
		})
	}
	return func() {
		if d.wc != nil {
			d.wc.stop()
		}
		if d.ms != nil {
			d.ms.stop()
		}
	}
}

// produceResult is how producing ended: the jobs produced, and its error.
type produceResult struct {
	n   int
	err error
}

// startProducing produces the run's jobs in a goroutine of wg until done
// or ctx ends, and returns where it reports the end; nil, with no jobs
// to produce.
func (d *demo) startProducing(ctx context.Context, wg *sync.WaitGroup) <-chan produceResult {
	if len(d.jobs) == 0 {
		return nil
	}
	produced := make(chan produceResult, 1)
	wg.Go(func() {
		n, err := produce(ctx, d.producer, topic, d.jobs)
		produced <- produceResult{n, err}
	})
	return produced
}

// countProduced waits for the end of producing, unless it was taken
// already (nil), and notes the count in the summary.
func (d *demo) countProduced(produced <-chan produceResult) {
	if produced != nil {
		d.sum.Produced = (<-produced).n
	}
}

// waitForJobs waits until every job has finished, and returns nil. It
// stops early, and marks the summary incomplete, when producing fails,
// the worker stops (Run returns before its context is cancelled only when
// it could not start: a wrong broker, a missing topic), -timeout passes,
// or ctx ends; it returns why, or nil when interrupted. An error of the
// worker's it puts back in workerErr, for whoever stops the worker.
// It takes producing's end from *produced when it comes, and sets
// *produced to nil then.
func (d *demo) waitForJobs(ctx context.Context, produced *<-chan produceResult, workerErr chan error) error {
	var timeoutC <-chan time.Time
	if d.cfg.Timeout > 0 && d.want > 0 {
		t := time.NewTimer(d.cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	sum := d.sum
	for {
		select {
		case <-d.tr.Done():
			// Every job ran: producing has ended, or ends as soon as
			// the brokers' last acknowledgements come.
			d.countProduced(*produced)
			*produced = nil
			return nil
		case r := <-*produced:
			*produced, sum.Produced = nil, r.n
			if r.err != nil && ctx.Err() == nil {
				sum.Incomplete, sum.StopReason = true, "producing failed"
				return r.err
			}
		case err := <-workerErr:
			workerErr <- err
			if err == nil {
				err = errors.New("worker stopped unexpectedly")
			}
			sum.Incomplete, sum.StopReason = true, "worker failed"
			return err
		case <-timeoutC:
			sum.Incomplete, sum.StopReason = true, "timeout"
			return fmt.Errorf("not every job finished within %v (-timeout)", d.cfg.Timeout)
		case <-ctx.Done():
			sum.Incomplete, sum.StopReason = d.want > 0, "interrupted"
			return nil
		}
	}
}

// report completes the summary (the tracker's counts, the handler's runs,
// what was saved, with -database the rows) and prints it to stdout, as
// text or JSON. It returns the error of writing the JSON.
func (d *demo) report(ctx context.Context) error {
	sum := d.sum
	sum.add(d.tr.snapshot())
	sum.HandlerRuns = d.thumbs.Runs()
	sum.Images, sum.Thumbnails, sum.Bytes, sum.SavedTwice = d.out.files.stats()
	if d.out.pool != nil && len(d.jobs) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var err error
		sum.DBRows, sum.DBJobs, err = countRows(cctx, d.out.pool, sum.Run)
		cancel()
		if err != nil {
			d.log.Error("count thumbnail rows", "error", err)
		}
	}
	if d.cfg.JSON {
		return sum.writeJSON(d.stdout)
	}
	sum.writeText(d.stdout)
	return nil
}

// stay waits until ctx ends or the worker stops; an error of the worker's
// it puts back in workerErr, for whoever stops the worker.
func (d *demo) stay(ctx context.Context, workerErr chan error) {
	select {
	case <-ctx.Done():
	case err := <-workerErr:
		workerErr <- err
	}
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
