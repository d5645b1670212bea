// Command thumbnails is shareq's showcase: a producer that writes image
// jobs to a Kafka topic and a worker that turns each image into thumbnails,
// on a share group.
//
// With no flags it needs nothing installed: it starts an in-process broker,
// produces 300 jobs (a few slow, one flaky, one corrupt), works them off,
// prints what happened, and keeps its web console (http://127.0.0.1:8080/)
// up until Ctrl-C (-stay=false exits after the summary):
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
//	worker.go     the worker: the handler on its topic, inside its middleware; the part to copy too
//	store.go      where thumbnails go: files, or memory
//	db.go         with -database: the claim store, and a table written in the claim's transaction
//	produce.go    the producer and the jobs it writes
//	images.go     the images the producer draws
//	main.go       flags
//	run.go        the wiring: broker, topics, producer, worker, and waiting for every job
//	kafka.go      the embedded broker and the topics
//	progress.go   a worker.Observer that follows every job to its outcome, and the progress line
//	console.go    stderr: the progress line on a terminal, with log lines above it
//	observe.go    Prometheus metrics (-metrics-addr)
//	webconsole.go shareq's web console (-console-addr)
//	summary.go    the summary printed at the end
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shareq/shareq/dlq"
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
	OTLP        string        // export traces over OTLP/HTTP to this URL; "": none
	ConsoleAddr string        // serve the web console there; "": none
	Jobs        int           // jobs to produce (and, with WorkOnly, to wait for)
	ImageSize   int           // longest side of the generated images
	JobsSet     bool          // -jobs was given
	Concurrency int           // handlers at once
	Out         string        // thumbnail directory; "" keeps them in memory
	OutTemp     bool          // make a temporary directory for Out
	ProduceOnly bool          // produce, then exit
	WorkOnly    bool          // work, do not produce
	Quiet       bool          // no progress, no logs below errors
	JSON        bool          // print the summary as JSON
	SlowDelay   time.Duration // how long the demo's slow jobs take
	Timeout     time.Duration // give up after this long (0: never)
	Stay        bool          // after the summary, keep the worker and the web console up until interrupted
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
	fs.StringVar(&cfg.OTLP, "otlp", os.Getenv("SHAREQ_OTLP_ENDPOINT"), "trace the jobs with OpenTelemetry and export the spans over OTLP/HTTP to `URL`, e.g. http://localhost:4318 (env SHAREQ_OTLP_ENDPOINT)")
	fs.StringVar(&cfg.ConsoleAddr, "console-addr", envOr("SHAREQ_CONSOLE_ADDR", "127.0.0.1:8080"), "serve shareq's web console (read-only) at http://`addr`/ while the demo runs (env SHAREQ_CONSOLE_ADDR); empty: none")
	fs.IntVar(&cfg.Jobs, "jobs", 300, "jobs to produce; with -work-only, stop after this many have finished")
	fs.IntVar(&cfg.ImageSize, "image-size", 1024, "longest side in `pixels` of the images produced (each is between a quarter of it and it)")
	fs.IntVar(&cfg.Concurrency, "concurrency", worker.ConcurrencyDefault, "handlers running at once")
	fs.StringVar(&cfg.Out, "out", "", "write thumbnails to `dir` (default: a new temporary directory; -out= keeps them in memory)")
	fs.BoolVar(&cfg.ProduceOnly, "produce-only", false, "produce the jobs and exit (needs -brokers)")
	fs.BoolVar(&cfg.WorkOnly, "work-only", false, "run the worker only, until interrupted or until -jobs jobs have finished (needs -brokers)")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only the summary and errors")
	fs.BoolVar(&cfg.JSON, "json", false, "print the summary as JSON")
	fs.DurationVar(&cfg.SlowDelay, "slow", 3*time.Second, "how long the demo's slow jobs take")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "stop and report if the jobs have not all finished by then (0: never)")
	fs.BoolVar(&cfg.Stay, "stay", true, "after the summary, keep the web console up, with the worker and the in-process broker it shows, until Ctrl-C (only while the console serves); -stay=false exits after the summary")
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
	case c.SlowDelay < 0:
		return errors.New("-slow must not be negative")
	}
	return nil
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
