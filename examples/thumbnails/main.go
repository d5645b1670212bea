// Command thumbnails is shareq's showcase: a producer that writes image
// jobs to a Kafka topic and a worker that turns each image into thumbnails,
// on a share group.
//
// With no flags it needs nothing installed: it starts an in-process broker,
// produces 300 jobs (a few slow, one flaky, one corrupt), works them off,
// and prints what happened:
//
//	go run ./examples/thumbnails
//
// Against a real cluster (Apache Kafka 4.2+), as one process, or as a
// producer and any number of workers, with the claims in Postgres:
//
//	go run ./examples/thumbnails -brokers localhost:9092
//	go run ./examples/thumbnails -brokers localhost:9092 -produce-only -jobs 1000
//	go run ./examples/thumbnails -brokers localhost:9092 -work-only -database postgres://…
//
// The files:
//
//	thumbnail.go  the handler: decode, resize, encode; the part to copy
//	store.go      where thumbnails go: files, or memory
//	db.go         with -database: the claim store and a table written in the claim's transaction
//	produce.go    the producer and the jobs it writes
//	images.go     the images the producer draws
//	progress.go   a worker.Observer that follows every job, and the progress line
//	observe.go    Prometheus metrics (-metrics-addr)
//	summary.go    the summary printed at the end
//	main.go       flags and wiring: broker, topics, middleware, worker
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/internal/devbroker"
	"github.com/shareq/shareq/middleware"
	"github.com/shareq/shareq/worker"
)

// The topic, its partitions and the share group of the demo.
const (
	topic      = "thumbnails"
	partitions = 6
	group      = "thumbnails"
)

// dlqTopic is where jobs that cannot succeed are parked: the dlq package's
// default name for topic's dead letters. One partition is plenty.
const (
	dlqTopic      = topic + dlq.TopicSuffix
	dlqPartitions = 1
)

// thumbnailSizes are the longest sides, in pixels, of the thumbnails made
// of every image.
var thumbnailSizes = []int{256, 128, 64}

// config is what the flags set. run takes it whole, so tests can run the
// program in-process.
type config struct {
	Brokers     []string      // empty: start the embedded broker
	DatabaseURL string        // Postgres for claims and results; "": in memory
	MetricsAddr string        // serve Prometheus metrics there; "": none
	Jobs        int           // jobs to produce (and, with WorkOnly, to wait for)
	ImageSize   int           // longest side of the generated images
	JobsSet     bool          // -jobs was given
	Concurrency int           // handlers at once
	Lanes       int           // share-group members; 0: the worker's default
	Out         string        // thumbnail directory; "" keeps them in memory
	OutTemp     bool          // make a temporary directory for Out
	ProduceOnly bool          // produce, then exit
	WorkOnly    bool          // work, do not produce
	Quiet       bool          // no progress, no logs below errors
	JSON        bool          // print the summary as JSON
	SlowDelay   time.Duration // how long the demo's slow jobs take
	Timeout     time.Duration // give up after this long (0: never)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "thumbnails:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("thumbnails", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	brokers := fs.String("brokers", os.Getenv("SHAREQ_BROKERS"), "comma-separated Kafka `host:port`s (env SHAREQ_BROKERS); empty: start an in-process broker")
	fs.StringVar(&cfg.DatabaseURL, "database", os.Getenv("SHAREQ_DATABASE_URL"), "Postgres `URL` for the idempotency claims and a thumbnails table (env SHAREQ_DATABASE_URL); empty: in memory")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", os.Getenv("SHAREQ_METRICS_ADDR"), "serve Prometheus metrics at http://`addr`/metrics, e.g. :2112 (env SHAREQ_METRICS_ADDR)")
	fs.IntVar(&cfg.Jobs, "jobs", 300, "jobs to produce; with -work-only, stop after this many have finished")
	fs.IntVar(&cfg.ImageSize, "image-size", 1024, "longest side in `pixels` of the images produced (each is between a quarter of it and it)")
	fs.IntVar(&cfg.Concurrency, "concurrency", worker.ConcurrencyDefault, "handlers running at once")
	fs.IntVar(&cfg.Lanes, "lanes", 0, "share-group members (Kafka clients); 0: one per handler slot")
	fs.StringVar(&cfg.Out, "out", "", "write thumbnails to `dir` (default: a new temporary directory; -out= keeps them in memory)")
	fs.BoolVar(&cfg.ProduceOnly, "produce-only", false, "produce the jobs and exit (needs -brokers)")
	fs.BoolVar(&cfg.WorkOnly, "work-only", false, "run the worker only, until interrupted or until -jobs jobs have finished (needs -brokers)")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only the summary and errors")
	fs.BoolVar(&cfg.JSON, "json", false, "print the summary as JSON")
	fs.DurationVar(&cfg.SlowDelay, "slow", 3*time.Second, "how long the demo's slow jobs take")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "stop and report if the jobs have not all finished by then (0: never)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: thumbnails [flags]\n\n"+
			"Produces thumbnail jobs to the topic \""+topic+"\" and works them off on the share group \""+group+"\".\n"+
			"With no -brokers it runs on an in-process broker and needs nothing installed.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.OutTemp = true
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "out":
			cfg.OutTemp = false
		case "jobs":
			cfg.JobsSet = true
		}
	})
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "thumbnails:", err)
		return cfg, err
	}
	return cfg, nil
}

func (c config) validate() error {
	switch {
	case c.ProduceOnly && c.WorkOnly:
		return errors.New("-produce-only and -work-only exclude each other")
	case (c.ProduceOnly || c.WorkOnly) && len(c.Brokers) == 0:
		return errors.New("-produce-only and -work-only need -brokers: the in-process broker lives only as long as this process")
	case c.Jobs < 0:
		return errors.New("-jobs must not be negative")
	case c.ImageSize < 16 || c.ImageSize > 4096:
		return errors.New("-image-size must be between 16 and 4096")
	case c.Concurrency < 1:
		return errors.New("-concurrency must be at least 1")
	case c.Lanes < 0:
		return errors.New("-lanes must not be negative")
	case c.SlowDelay < 0:
		return errors.New("-slow must not be negative")
	}
	return nil
}

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
	sum := &Summary{Topic: topic, DLQTopic: dlqTopic, Brokers: strings.Join(cfg.Brokers, ",")}

	// 1. A broker: the one given, or one in this process.
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		c, err := devbroker.Start(0, partitions)
		if err != nil {
			return err
		}
		defer c.Close()
		brokers = c.ListenAddrs()
		sum.Brokers, sum.Embedded = strings.Join(brokers, ","), true
		con.printf("started an in-process Kafka broker (kfake) on %s", sum.Brokers)
	}

	// 2. One client for producing jobs, parking dead letters and creating
	// topics. The worker makes its own clients, one per lane.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if sum.Embedded {
		if err := shortenLocks(ctx, adm); err != nil {
			return err
		}
	}
	if err := ensureTopic(ctx, adm, con, sum.Embedded, topic, partitions); err != nil {
		return err
	}
	if err := ensureTopic(ctx, adm, con, sum.Embedded, dlqTopic, dlqPartitions); err != nil {
		return err
	}

	// 3. The jobs of this run.
	sum.Run = strconv.FormatInt(time.Now().UnixMilli(), 36)
	var jobs []jobSpec
	if !cfg.WorkOnly {
		jobs = planJobs(sum.Run, cfg.Jobs, cfg.ImageSize)
		for _, j := range jobs {
			if j.demo == "slow" {
				sum.Slow = append(sum.Slow, j.imageID)
			}
		}
		if cfg.SlowDelay > 0 && len(sum.Slow) > 0 {
			sum.SlowDelay = cfg.SlowDelay
		} else {
			sum.Slow = nil
		}
	}
	if cfg.ProduceOnly {
		return produceOnly(ctx, cl, jobs, sum, cfg.JSON, stdout)
	}

	// 4. Where thumbnails and claims go.
	if cfg.OutTemp {
		if cfg.Out, err = os.MkdirTemp("", "shareq-thumbnails-"); err != nil {
			return err
		}
	} else if cfg.Out != "" {
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return err
		}
	}
	sum.OutDir = cfg.Out
	files := newMemorySink(cfg.Out)
	var (
		sink  Sink = files
		store idempotency.Store
		pool  *pgxpool.Pool
	)
	if cfg.DatabaseURL != "" {
		p, pgStore, err := openDatabase(ctx, cfg.DatabaseURL, cfg.Concurrency)
		if err != nil {
			return err
		}
		defer p.Close()
		pool, store, sink = p, pgStore, &pgSink{files: files}
		sum.Store = "postgres"
	} else {
		store = idempotency.NewMemoryStore()
		sum.Store = "memory"
	}
	thumbs := &Thumbnailer{Sizes: thumbnailSizes, Sink: sink, SlowDelay: cfg.SlowDelay}

	// 5. Who watches: the tracker follows every job to its final outcome
	// (and so knows when the demo is over); with -metrics-addr, Prometheus
	// metrics too.
	want := len(jobs)
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.jobID
	}
	if cfg.WorkOnly {
		want = 0
		if cfg.JobsSet {
			want = cfg.Jobs
		}
	}
	sum.Expected = want
	tr := newTracker(want, ids)
	obs := observers{tr}
	onPark, onDuplicate := tr.parkedHook, tr.duplicateHook
	var ms *metricsServer
	if cfg.MetricsAddr != "" {
		if ms, err = startMetrics(cfg.MetricsAddr, adm, log); err != nil {
			return err
		}
		obs = append(obs, ms.m)
		onPark = func(j *handler.Job, reason string) { tr.parkedHook(j, reason); ms.m.Parked(j, reason) }
		onDuplicate = func(j *handler.Job, key string) { tr.duplicateHook(j, key); ms.m.Duplicate(j, key) }
		con.printf("serving metrics at http://%s/metrics", ms.ln.Addr())
	}

	// 6. The middleware around the handler, outermost first:
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
	park, err := dlq.Middleware(cl, dlq.OnPark(onPark), dlq.Logger(log))
	if err != nil {
		return err
	}
	timeout, err := middleware.Timeout(time.Minute)
	if err != nil {
		return err
	}
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(onDuplicate))
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers(brokers...),
		worker.Group(group),
		worker.Handle(topic, thumbs, park, middleware.Logging(log), timeout, claims),
		worker.Concurrency(cfg.Concurrency),
		worker.Lanes(cfg.Lanes),
		// A new share group starts at the latest record; this one must
		// also see the jobs produced before it joined.
		worker.AutoOffsetReset("earliest"),
		worker.ShutdownTimeout(10*time.Second),
		worker.Logger(log),
		worker.WithObserver(obs),
	)
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
	produced := make(chan error, 1)
	if len(jobs) > 0 {
		wg.Go(func() {
			n, err := produce(wctx, cl, topic, jobs)
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
	// them, and closes its clients.
	close(stopProgress)
	stopWorker()
	if err := <-workerErr; err != nil && runErr == nil {
		runErr = err
	}
	con.clear()

	// 9. The summary.
	c := tr.snapshot()
	sum.Finished, sum.Done = c.finished, c.done
	sum.Retried, sum.Released = c.retried, c.released
	sum.Parked, sum.Rejected, sum.Archived = nonEmpty(c.parked), nonEmpty(c.rejected), nonEmpty(c.archived)
	sum.Duplicates, sum.Others = c.dupes, c.others
	sum.Renewals, sum.RenewalsFailed = c.renewals, c.renewalsFailed
	sum.SlowestJob, sum.Slowest = c.slowestID, c.slowest
	sum.Elapsed = c.elapsed
	if c.elapsed > 0 {
		sum.Throughput = float64(c.finished) / c.elapsed.Seconds()
	}
	sum.HandlerRuns = thumbs.Runs()
	sum.Images, sum.Thumbnails, sum.Bytes, sum.SavedTwice = files.stats()
	if pool != nil && len(jobs) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		sum.DBRows, sum.DBJobs, err = countRows(cctx, pool, sum.Run)
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
	return runErr
}

// produceOnly produces the jobs and reports.
func produceOnly(ctx context.Context, cl *kgo.Client, jobs []jobSpec, sum *Summary, asJSON bool, stdout io.Writer) error {
	start := time.Now()
	n, err := produce(ctx, cl, topic, jobs)
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

func nonEmpty(m map[string]int) map[string]int {
	if len(m) == 0 {
		return nil
	}
	return m
}

// showProgress shows the progress line until stop is closed: redrawn five
// times a second on a terminal; elsewhere printed when it changes, at most
// every two seconds (and every 30 seconds when idle).
func showProgress(con *console, tr *tracker, want int, stop <-chan struct{}) {
	every := 2 * time.Second
	if con.tty {
		every = 200 * time.Millisecond
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	var last counts
	var lastAt time.Time
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c := tr.snapshot()
			if !con.tty && c.finished == last.finished && c.running == last.running && now.Sub(lastAt) < 30*time.Second {
				continue
			}
			last, lastAt = c, now
			con.status(progressLine(c, want, now.Sub(start), con.tty))
		}
	}
}

// embeddedLock is how long the embedded broker locks a delivered record.
const embeddedLock = 5 * time.Second

// shortenLocks sets the embedded broker's record lock to embeddedLock
// instead of Kafka's 30 s, so that the demo's slow jobs (3 s) outrun half
// their lock and the worker renews it while they run, as it does for a job
// of minutes on a real cluster. On a real cluster, set the group config
// share.record.lock.duration.ms instead (the embedded broker ignores it).
func shortenLocks(ctx context.Context, adm *kadm.Client) error {
	ms := strconv.Itoa(int(embeddedLock / time.Millisecond))
	res, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "group.share.record.lock.duration.ms", Value: &ms},
	})
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("set the embedded broker's lock duration: %w", err)
	}
	return nil
}

// ensureTopic creates the topic name with n partitions and the cluster's
// default replication factor, unless it exists. shareq never creates
// topics: that is for whoever runs the cluster (see deploy/kafka/init.sh),
// and here for the example.
func ensureTopic(ctx context.Context, adm *kadm.Client, con *console, embedded bool, name string, n int32) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	have, err := adm.ListTopics(ctx, name)
	if err != nil {
		return fmt.Errorf("cannot reach Kafka to list topics: %w (is the broker running? without -brokers the example starts its own)", err)
	}
	if d, ok := have[name]; ok && d.Err == nil {
		if !embedded {
			con.printf("topic %s exists (%d partitions)", name, len(d.Partitions))
		}
		return nil
	}
	res, err := adm.CreateTopic(ctx, n, -1, nil, name)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w (create it yourself, or give this client the right to)", name, err)
	}
	if !embedded {
		con.printf("created topic %s (%d partitions)", name, n)
	}
	return nil
}
