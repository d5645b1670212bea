package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/worker"
)

// Job kinds, carried in each job's JSON value.
const (
	kindQuick  = "quick"  // sleeps a few ms, writes its effect, succeeds
	kindSlow   = "slow"   // sleeps past the record lock: needs RENEW
	kindPoison = "poison" // writes its effect, then fails (retryable) every time
)

// payload is a soak job's value.
type payload struct {
	Kind    string `json:"kind"`
	SleepMS int    `json:"ms"`
}

// poisonSecret is put into the poison handler's error text; the worker's
// dlq.Redact removes it, and the driver checks that no DLQ record holds it.
const poisonSecret = "token=soak-s3cr3t"

var secretRE = regexp.MustCompile(`token=[^\s&]+`)

// clientIDPrefix and the process name are a worker's Kafka client ID, by
// which the driver finds its member in the group.
const clientIDPrefix = "shareq-soak-"

// workerFlags are the settings of one worker process, passed by the driver.
type workerFlags struct {
	name            string
	brokers         string
	group           string
	topic           string
	pgURL           string
	schema          string
	concurrency     int
	shutdownTimeout time.Duration
	spare           int
	groupLimit      int
	topicRate       int
	healStalls      bool
	batch           int
	webhookFlag     string
	kafkaVia        string
	deadline        time.Time
}

// workerMain runs one worker process ("shareq-soak worker ..."): a
// worker.Worker with dlq.Middleware outermost and idempotency.Middleware on
// a pgstore claim store inside it. It reports events to the driver as
// lines on stdout (see emit) and logs to stderr. It stops gracefully on
// SIGTERM or SIGINT, when stdin closes (the driver went away), or at its
// deadline, and exits 0 after a graceful stop.
func workerMain(args []string) int {
	var f workerFlags
	var deadline string
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&f.name, "name", "w", "worker name, for events and logs")
	fs.StringVar(&f.brokers, "brokers", "", "seed brokers, comma separated")
	fs.StringVar(&f.group, "group", "", "share group")
	fs.StringVar(&f.topic, "topic", "", "job topic (jobs are parked in TOPIC.dlq)")
	fs.StringVar(&f.pgURL, "pg", "", "Postgres URL")
	fs.StringVar(&f.schema, "schema", "", "Postgres schema holding the claim and effect tables")
	fs.IntVar(&f.concurrency, "concurrency", 8, "handlers at once")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 3*time.Second, "worker.ShutdownTimeout")
	fs.IntVar(&f.spare, "spare", 0, "worker.SpareDeliveries: failing jobs are parked this many deliveries before the group's limit")
	fs.IntVar(&f.groupLimit, "group-limit", 0, "worker.DeliveryLimit: the group's share.delivery.count.limit, written before joining (0: leave it)")
	fs.StringVar(&f.webhookFlag, "webhook-flag", "", "while this file exists, the \"webhook\" every job calls is down: handlers return handler.Unavailable(\"webhook\")")
	fs.StringVar(&f.kafkaVia, "kafka-via", "", "send every broker connection to this address (a proxy of the single broker: the silent-broker fault)")
	fs.IntVar(&f.topicRate, "topic-rate", 0, "worker.TopicRate: jobs a second across the group, which a live limit replaces (0: no limit)")
	fs.BoolVar(&f.healStalls, "heal-stalls", false, "worker.HealStalls: free a partition the broker stopped serving (needs the status topic shareq.workers)")
	fs.IntVar(&f.batch, "batch", 0, "run the jobs through a batch handler of this many (handler.Batch behind idempotency.Batch on pgstore, one claim transaction a batch; 0: one job at a time behind idempotency.Middleware)")
	fs.StringVar(&deadline, "deadline", "", "RFC 3339 time at which to stop regardless")
	registerSamplerFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if f.brokers == "" || f.group == "" || f.topic == "" || f.pgURL == "" || f.schema == "" {
		fmt.Fprintln(os.Stderr, "shareq-soak worker: -brokers, -group, -topic, -pg and -schema are required")
		return 2
	}
	if deadline != "" {
		t, err := time.Parse(time.RFC3339Nano, deadline)
		if err != nil {
			fmt.Fprintf(os.Stderr, "shareq-soak worker: -deadline: %v\n", err)
			return 2
		}
		f.deadline = t
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("proc", f.name)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !f.deadline.IsZero() {
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, f.deadline)
		defer c()
	}
	// The driver holds our stdin open; EOF means it is gone.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel(errors.New("stdin closed: driver gone"))
	}()

	go writeStatus(ctx, f.name)
	if err := runWorker(ctx, f, log); err != nil {
		log.Error("worker failed", "error", err)
		emit("exit", "error", oneLine(err.Error()))
		return 1
	}
	log.Info("worker stopped", "cause", context.Cause(ctx))
	emit("exit", "ok")
	return 0
}

func runWorker(ctx context.Context, f workerFlags, log *slog.Logger) error {
	pcfg, err := pgxpool.ParseConfig(f.pgURL)
	if err != nil {
		return fmt.Errorf("postgres url: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = f.schema
	pcfg.MaxConns = int32(f.concurrency + 2)
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool)
	if err != nil {
		return err
	}
	if err := retryStart(ctx, log, "claim table check", func(ctx context.Context) error { return store.Check(ctx) }); err != nil {
		return err
	}
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(func(job *handler.Job, _ string) {
		emit("dup", job.ID())
	}))
	if err != nil {
		return err
	}

	brokers := strings.Split(f.brokers, ",")
	producer, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, viaProxy(f.kafkaVia)...)...)
	if err != nil {
		return err
	}
	defer producer.Close()
	park, err := dlq.Middleware(producer,
		dlq.Logger(log),
		dlq.Redact(func(err error) string { return secretRE.ReplaceAllString(err.Error(), "token=REDACTED") }),
		dlq.OnPark(func(job *handler.Job, reason string) { emit("park", job.ID(), reason) }),
	)
	if err != nil {
		return err
	}

	js := soakJobs{f: f}
	h, use := handler.Handler(handler.JSON(js.one)), []handler.Middleware{park, claims}
	if f.batch > 0 {
		fn, err := idempotency.Batch(store, js.batch, idempotency.OnDuplicate(func(job *handler.Job, _ string) {
			emit("dup", job.ID())
		}))
		if err != nil {
			return err
		}
		h, use = handler.Batch(f.batch, 50*time.Millisecond, fn), []handler.Middleware{park}
	}

	opts := []worker.Option{
		worker.Brokers(brokers...),
		worker.Group(f.group),
		worker.Handle(f.topic, h),
		worker.Use(use...),
		worker.RequireTopics(f.topic + dlq.TopicSuffix),
		worker.Concurrency(f.concurrency),
		worker.ShutdownTimeout(f.shutdownTimeout),
		worker.StartTimeout(20 * time.Second),
		worker.Logger(log),
		worker.Observers(observer{}),
		worker.ClientOpts(append(viaProxy(f.kafkaVia), kgo.ClientID(clientIDPrefix+f.name))...),
	}
	if f.groupLimit > 0 {
		opts = append(opts, worker.DeliveryLimit(f.groupLimit))
	}
	if f.spare > 0 {
		opts = append(opts, worker.SpareDeliveries(f.spare))
	}
	if f.topicRate > 0 {
		opts = append(opts, worker.TopicRate(f.topic, f.topicRate, time.Second))
	}
	if f.healStalls {
		opts = append(opts, worker.HealStalls(true))
	}
	if workerExtra.maxBytesInHand > 0 {
		opts = append(opts, worker.MaxBytesInHand(workerExtra.maxBytesInHand))
	}
	// A worker restarted while the broker is down fails its start-up
	// checks; keep trying, as a supervisor (systemd, Kubernetes) would.
	for {
		w, err := worker.New(opts...)
		if err != nil {
			return err
		}
		err = w.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, worker.ErrBrokersUnreachable) {
			return err
		}
		log.Warn("worker start failed; retrying", "error", err)
		emit("startretry", oneLine(err.Error()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// retryStart retries fn (a start-up check against a service that may be
// restarting) until it succeeds or ctx ends.
func retryStart(ctx context.Context, log *slog.Logger, what string, fn func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		log.Warn("start-up check failed; retrying", "check", what, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(time.Second):
		}
	}
}

// observer reports the worker's events to the driver.
type observer struct{}

var (
	_ worker.Observer          = observer{}
	_ worker.PauseObserver     = observer{}
	_ worker.StallObserver     = observer{}
	_ worker.StallHealObserver = observer{}
)

func (observer) PartitionStalled(topic string, partition int32, stalled bool) {
	emit("stall", fmt.Sprintf("%s/%d", topic, partition), strconv.FormatBool(stalled))
}

func (observer) StallHealed(topic string, partition int32, result string) {
	emit("heal", fmt.Sprintf("%s/%d", topic, partition), result)
}

func (observer) WorkerPaused(dependency string, _ error) { emit("pause", dependency) }

func (observer) WorkerResumed(dependency string, down time.Duration, back bool) {
	emit("resume", dependency, down.Round(time.Millisecond).String(), fmt.Sprint(back))
}

func (observer) JobStarted(job *handler.Job) {
	// The start time on the worker's clock: the limited-worker-kill
	// fault counts starts per second with it.
	emit("start", job.ID(), fmt.Sprint(job.DeliveryCount), strconv.FormatInt(time.Now().UnixMicro(), 10))
}

func (observer) JobFinished(job *handler.Job, res worker.Result) {
	why := "ok"
	switch {
	case errors.Is(res.Err, worker.ErrLockExpired):
		why = "lock-expired"
	case errors.Is(res.Err, worker.ErrLockLost):
		why = "lock-lost"
	case errors.Is(res.Err, worker.ErrMaxHold):
		why = "max-hold"
	case errors.Is(res.Err, worker.ErrShutdown):
		why = "shutdown"
	case res.Err != nil:
		why = handler.ReasonOf(res.Err)
		if why == "" {
			why = "error"
		}
	}
	ran := "0"
	if res.Ran {
		ran = "1"
	}
	fields := []string{job.ID(), res.Ack.String(), why, fmt.Sprint(job.DeliveryCount), ran,
		fmt.Sprintf("p%d/o%d", job.Partition, job.Offset)}
	if res.Err != nil && why != "error" {
		// Errors other than the poison job's own: say what failed.
		fields = append(fields, oneLine(res.Err.Error()))
	}
	emit("finish", fields...)
}

func (observer) LockRenewed(job *handler.Job, err error) {
	if err != nil {
		emit("renew", job.ID(), "fail", oneLine(err.Error()))
		return
	}
	emit("renew", job.ID(), "ok")
}

func (observer) AckFailed(topic string, partition int32, err error) {
	emit("ackfail", topic, fmt.Sprint(partition), oneLine(err.Error()))
}

// Events go to stdout as "EVENT kind field...", one line each, written at
// once (unbuffered) so that a SIGKILL loses none that were emitted.
var (
	emitMu  sync.Mutex
	emitOut = bufio.NewWriterSize(os.Stdout, 4096)
)

func emit(kind string, fields ...string) {
	emitMu.Lock()
	defer emitMu.Unlock()
	emitOut.WriteString("EVENT " + kind)
	for _, f := range fields {
		emitOut.WriteString(" " + strings.ReplaceAll(f, " ", "_"))
	}
	emitOut.WriteByte('\n')
	_ = emitOut.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
