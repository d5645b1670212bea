package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/worker"
)

// River's fetch settings for the comparison. Its defaults (cooldown
// 100 ms, poll 1 s) are tuned for database load and latency and cap a
// queue at MaxWorkers jobs per cooldown; these are River's minimum
// cooldown and a short poll, so that River fetches as soon as a slot is
// free, as shareq's worker does.
const (
	riverFetchCooldown     = river.FetchCooldownMin
	riverFetchPollInterval = 20 * time.Millisecond
)

// eosResult holds the figures of the exactly-once scenario: shareq at
// Concurrency and River at MaxWorkers Concurrency, on as many jobs each.
type eosResult struct {
	Jobs, Concurrency int
	Shareq            eosShareq
	River             float64 // jobs/s
	RiverRows         int64   // side-effect rows written
	RiverRuns         int64   // worker runs that committed
}

// eosShareq is shareq's side of the exactly-once scenario.
type eosShareq struct {
	Rate         float64 // jobs/s
	Rows, Claims int64   // side-effect rows and claim rows written
	Runs         int64   // handler runs that wrote their row
}

// span measures from the first job started to the last one committed.
type span struct {
	first, last atomic.Int64
	n           atomic.Int64
	want        int64
	all         chan struct{}
	once        sync.Once
}

func newSpan(want int) *span { return &span{want: int64(want), all: make(chan struct{})} }

func (s *span) started() { s.first.CompareAndSwap(0, time.Now().UnixNano()) }

func (s *span) finished() {
	s.last.Store(time.Now().UnixNano())
	if s.n.Add(1) == s.want {
		s.once.Do(func() { close(s.all) })
	}
}

func (s *span) rate() float64 {
	d := time.Duration(s.last.Load() - s.first.Load())
	if d <= 0 {
		return 0
	}
	return float64(s.n.Load()) / d.Seconds()
}

func (s *span) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-s.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("%w: %d of %d jobs in %v", errTimeout, s.n.Load(), s.want, timeout)
	}
}

// runEOS runs jobs that each insert one row, with shareq's claim-row
// middleware and with River completing the job in the row's transaction.
func runEOS(ctx context.Context, c *cluster, log *slog.Logger, dbURL string, jobs, concurrency int, progress func(string)) (eosResult, error) {
	res := eosResult{Jobs: jobs, Concurrency: concurrency}
	schema := "shareq_bench_" + randHex(4)
	riverSchema := schema + "_river"
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return res, fmt.Errorf("postgres: %w", err)
	}
	defer admin.Close()
	if err := admin.Ping(ctx); err != nil {
		return res, fmt.Errorf("postgres: %w (start it with scripts/postgres.sh up)", err)
	}
	for _, s := range []string{schema, riverSchema} {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			return res, fmt.Errorf("postgres: %w", err)
		}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, s := range []string{schema, riverSchema} {
			if _, err := admin.Exec(dctx, "DROP SCHEMA "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
				log.Warn("drop schema", "schema", s, "error", err)
			}
		}
	}()

	progress(fmt.Sprintf("shareq + pgstore concurrency=%d", concurrency))
	res.Shareq, err = shareqEOS(ctx, c, log, dbURL, schema, jobs, concurrency)
	if err != nil {
		return res, fmt.Errorf("shareq concurrency=%d: %w", concurrency, err)
	}
	progress(fmt.Sprintf("River MaxWorkers=%d", concurrency))
	if err := riverEOS(ctx, log, dbURL, schema, riverSchema, &res); err != nil {
		return res, fmt.Errorf("river: %w", err)
	}
	return res, nil
}

func newPool(ctx context.Context, dbURL, searchPath string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = maxConns
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// shareqEOS runs the jobs on a shareq worker of concurrency handler slots
// with the claim-row middleware, each job inserting its row in the claim's
// transaction.
func shareqEOS(ctx context.Context, c *cluster, log *slog.Logger, dbURL, schema string, jobs, concurrency int) (eosShareq, error) {
	var res eosShareq
	pool, err := newPool(ctx, dbURL, schema, int32(concurrency+4))
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return res, err
	}
	effects := fmt.Sprintf("effects_c%d", concurrency)
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (job text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return res, err
	}
	store, err := pgstore.New(pool)
	if err != nil {
		return res, err
	}
	if err := store.Check(ctx); err != nil {
		return res, err
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		return res, err
	}

	topic, err := c.topic(ctx, "eos", 6)
	if err != nil {
		return res, err
	}
	group, err := c.shareGroup(ctx, "eos")
	if err != nil {
		return res, err
	}
	recs := make([]*kgo.Record, jobs)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i))}
	}
	if err := c.produce(ctx, recs); err != nil {
		return res, err
	}

	sp := newSpan(jobs)
	var runs atomic.Int64
	// Outermost: times the job including the claim's commit.
	timing := func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			sp.started()
			err := next.Handle(ctx, job)
			if err == nil {
				sp.finished()
			}
			return err
		})
	}
	insert := "INSERT INTO " + effects + " (job) VALUES ($1)"
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return handler.Permanent(errors.New("no claim transaction"))
		}
		if _, err := tx.Exec(ctx, insert, job.ID()); err != nil {
			return err
		}
		runs.Add(1)
		return nil
	})
	w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.Use(timing, claims),
		worker.Concurrency(concurrency), worker.ShutdownTimeout(10*time.Second), worker.Logger(log))
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	err = sp.wait(ctx, 10*time.Minute)
	cancel()
	if err := errors.Join(err, <-ran); err != nil {
		return res, err
	}
	res.Rate = sp.rate()
	res.Runs = runs.Load() // a run whose claim did not commit shows as runs > rows
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+effects).Scan(&res.Rows); err != nil {
		return res, err
	}
	// Claims are keyed group/topic/…; the check row of store.Check was
	// rolled back.
	err = pool.QueryRow(ctx, "SELECT count(*) FROM shareq_processed_jobs WHERE starts_with(key, $1)", group+"/").Scan(&res.Claims)
	return res, err
}

// benchArgs is the River job of the comparison.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "shareq_bench_effect" }

// effectWorker inserts the job's row and completes the job in the same
// transaction, River's exactly-once pattern (JobCompleteTx).
type effectWorker struct {
	river.WorkerDefaults[benchArgs]
	pool   *pgxpool.Pool
	insert string
	sp     *span
	runs   *atomic.Int64
}

func (w *effectWorker) Work(ctx context.Context, job *river.Job[benchArgs]) error {
	w.sp.started()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, w.insert, job.Args.N); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.runs.Add(1)
	w.sp.finished()
	return nil
}

func riverEOS(ctx context.Context, log *slog.Logger, dbURL, schema, riverSchema string, res *eosResult) error {
	// River's worker slots, plus its producer, completer, notifier and
	// maintenance connections.
	pool, err := newPool(ctx, dbURL, "", int32(res.Concurrency+8))
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: riverSchema, Logger: log})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	table := pgx.Identifier{schema, "river_effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (job bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return err
	}

	sp := newSpan(res.Jobs)
	var runs atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &effectWorker{pool: pool, insert: "INSERT INTO " + table + " (job) VALUES ($1)", sp: sp, runs: &runs})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            riverSchema,
		Logger:            log,
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: res.Concurrency}},
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
	})
	if err != nil {
		return err
	}
	const chunk = 1000
	for i := 0; i < res.Jobs; i += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for j := i; j < min(i+chunk, res.Jobs); j++ {
			params = append(params, river.InsertManyParams{Args: benchArgs{N: j}})
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	err = sp.wait(ctx, 10*time.Minute)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := errors.Join(err, client.Stop(sctx)); err != nil {
		return err
	}
	res.River = sp.rate()
	res.RiverRuns = runs.Load()
	return pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&res.RiverRows)
}
