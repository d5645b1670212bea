package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/worker"
)

// Snooze scenario: snoozeJobs jobs enqueued through the outbox, each
// snoozed snoozeTimes times for snoozeFor (past the worker's minute of
// holding, so each copy goes to pgoutbox.Snoozer at once) and then
// writing its effect in the claim's transaction, run by snoozeWorkers
// worker processes with the claim middleware, one of which is killed
// with SIGKILL in the middle of the third round of runs.
const (
	snoozeJobs        = 1000
	snoozeTimes       = 3
	snoozeFor         = 61 * time.Second
	snoozeWorkers     = 2
	snoozeConcurrency = 16
	snoozePartitions  = 6
	snoozeTimeout     = 10 * time.Minute
	// snoozeWorkerCmd is the hidden command that makes shareq-bench a
	// snooze worker process.
	snoozeWorkerCmd = "snooze-worker"
)

// snoozeResult is what the snooze scenario counted.
type snoozeResult struct {
	Variant              string
	Once, Double, Lost   int // jobs whose effect committed once, effects past one, jobs without one
	Runs, RunsBeforeKill int // handler runs in all, and when the worker was killed
	RunsAgain            int // (job, snooze count) pairs run more than once: the killed worker's
	Deliveries2          int // runs on a delivery past the first
	FinalDeliveries2     int // effects committed on a delivery past the first
	Records              int64
	Makespan             time.Duration
}

// snoozeScenario runs the snooze scenario and adds its rows.
func snoozeScenario(ctx context.Context, c *cluster, log *slog.Logger, dbURL string, add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	if dbURL == "" {
		progress("snooze: skipped, no -database (scripts/postgres.sh url)")
		return nil
	}
	progress(fmt.Sprintf("snooze: %d jobs × %d snoozes of %v, %d worker processes, one killed", snoozeJobs, snoozeTimes, snoozeFor, snoozeWorkers))
	r, err := runSnooze(ctx, c, log, dbURL, progress)
	if r.Variant == "" {
		return err
	}
	v := r.Variant
	add(v, "jobs_run_once", float64(r.Once), "jobs", fmt.Sprintf("of %d; want all", snoozeJobs))
	add(v, "double_runs", float64(r.Double), "count", "effects past one per job; must be 0")
	add(v, "lost_jobs", float64(r.Lost), "jobs", "no effect; must be 0")
	add(v, "runs", float64(r.Runs), "count", fmt.Sprintf("%d before the kill; %d without one", r.RunsBeforeKill, snoozeJobs*(snoozeTimes+1)))
	add(v, "runs_repeated", float64(r.RunsAgain), "count", "a snooze count of a job run twice: the killed worker's jobs")
	add(v, "runs_on_delivery_gt1", float64(r.Deliveries2), "count", fmt.Sprintf("of which %d final (effect) runs", r.FinalDeliveries2))
	add(v, "records", float64(r.Records), "count", fmt.Sprintf("want %d: each job and its %d copies, none written twice", snoozeJobs*(snoozeTimes+1), snoozeTimes))
	add(v, "makespan", r.Makespan.Seconds(), "s", fmt.Sprintf("ideal %v: %d snoozes of %v", snoozeTimes*snoozeFor, snoozeTimes, snoozeFor))
	return err
}

// runSnooze enqueues the jobs, runs the worker processes and a relay,
// kills one worker mid-way and counts what ran.
func runSnooze(ctx context.Context, c *cluster, log *slog.Logger, dbURL string, progress func(string)) (snoozeResult, error) {
	var res snoozeResult
	schema := "shareq_bench_snooze_" + randHex(4)
	pool, drop, err := snoozeSchema(ctx, dbURL, schema)
	if err != nil {
		return res, err
	}
	defer drop(log)
	topic, err := c.topic(ctx, "snooze", snoozePartitions)
	if err != nil {
		return res, err
	}
	group, err := c.shareGroup(ctx, "snooze")
	if err != nil {
		return res, err
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, enqueue.ProducerOpts()...)...)
	if err != nil {
		return res, err
	}
	defer prod.Close()
	relay, err := pgoutbox.NewRelay(pool, prod, pgoutbox.Logger(log))
	if err != nil {
		return res, err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer func() {
		stopRelay()
		if err := <-relayDone; err != nil {
			log.Warn("snooze: relay", "error", err)
		}
	}()

	dbu, err := url.Parse(dbURL)
	if err != nil {
		return res, err
	}
	q := dbu.Query()
	q.Set("search_path", schema)
	dbu.RawQuery = q.Encode()
	var procs []*snoozeProc
	defer func() {
		for _, p := range procs {
			if err := p.stop(); err != nil {
				log.Warn("snooze: worker", "error", err)
			}
		}
	}()
	for range snoozeWorkers {
		p, err := startSnoozeWorker(ctx, c.seeds, group, topic, dbu.String())
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	if err := c.waitShareMembers(ctx, group, snoozeWorkers); err != nil {
		return res, err
	}
	res.Variant = fmt.Sprintf("%d workers × concurrency=%d, 1 SIGKILLed, %d snoozes of %v", snoozeWorkers, snoozeConcurrency, snoozeTimes, snoozeFor)
	start := time.Now()
	if err := snoozeEnqueue(ctx, pool, topic); err != nil {
		return res, err
	}
	// Mid-way: in the third round of runs.
	killAt := snoozeJobs*2 + snoozeJobs/4
	if err := waitCount(ctx, pool, "SELECT count(*) FROM snooze_runs", killAt, snoozeTimeout); err != nil {
		return res, err
	}
	procs[0].kill()
	res.RunsBeforeKill, _ = count(ctx, pool, "SELECT count(*) FROM snooze_runs")
	progress(fmt.Sprintf("snooze: killed a worker after %d runs", res.RunsBeforeKill))
	err = waitCount(ctx, pool, "SELECT count(DISTINCT job_id) FROM snooze_effects", snoozeJobs, snoozeTimeout)
	res.Makespan = time.Since(start)
	if err == nil {
		err = waitSettled(ctx, c.adm, pool, group, topic)
	}
	return res, errors.Join(err, snoozeCount(ctx, c.adm, pool, topic, &res))
}

// snoozeSchema creates schema with the migrations and the scenario's
// tables, and returns a pool on it and a func that drops it.
func snoozeSchema(ctx context.Context, dbURL, schema string) (*pgxpool.Pool, func(*slog.Logger), error) {
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("postgres: %w (start it with scripts/postgres.sh up)", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return nil, nil, fmt.Errorf("postgres: %w", err)
	}
	drop := func(log *slog.Logger) {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(dctx, dbURL)
		if err == nil {
			_, err = conn.Exec(dctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			conn.Close(dctx)
		}
		if err != nil {
			log.Warn("drop schema", "schema", schema, "error", err)
		}
	}
	pool, err := newPool(ctx, dbURL, schema, 8)
	if err == nil {
		err = migrations.Up(ctx, pool)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `
			CREATE TABLE snooze_runs (job_id text NOT NULL, snoozes int NOT NULL, delivery int NOT NULL);
			CREATE TABLE snooze_effects (job_id text NOT NULL, snoozes int NOT NULL, delivery int NOT NULL)`)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		drop(slog.New(slog.DiscardHandler))
		return nil, nil, err
	}
	return pool, func(log *slog.Logger) { pool.Close(); drop(log) }, nil
}

// snoozeEnqueue commits the jobs through the outbox, in one transaction.
func snoozeEnqueue(ctx context.Context, pool *pgxpool.Pool, topic string) error {
	jobs := make([]enqueue.Job, snoozeJobs)
	for i := range jobs {
		jobs[i] = enqueue.NewJob(topic, enqueue.Raw(fmt.Sprint(i)))
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueManyTx(ctx, tx, jobs...)
		return err
	})
}

// count runs a count(*) query.
func count(ctx context.Context, pool *pgxpool.Pool, sql string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, sql).Scan(&n)
	return n, err
}

// waitCount waits until sql counts at least n.
func waitCount(ctx context.Context, pool *pgxpool.Pool, sql string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := count(ctx, pool, sql)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: %d of %d in %v (%v)", errTimeout, sql, got, n, timeout, err)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitSettled waits until the outbox is empty and the group acknowledged
// every record of topic: no run can come after.
func waitSettled(ctx context.Context, adm *kadm.Client, pool *pgxpool.Pool, group, topic string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rows, err := count(ctx, pool, "SELECT count(*) FROM "+pgoutbox.Table)
		if err == nil && rows == 0 && lagZero(ctx, adm, group, topic) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: outbox rows %d, or the group's lag, not 0 within 2m", errTimeout, rows)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// lagZero reports whether group acknowledged every record of topic.
func lagZero(ctx context.Context, adm *kadm.Client, group, topic string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil || d[group].Err != nil {
		return false
	}
	offs := d[group].Offsets[topic]
	for _, o := range offs {
		if o.Err != nil || o.Lag != 0 {
			return false
		}
	}
	return len(offs) > 0
}

// snoozeCount reads the scenario's counts into res.
func snoozeCount(ctx context.Context, adm *kadm.Client, pool *pgxpool.Pool, topic string, res *snoozeResult) error {
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM snooze_effects GROUP BY job_id HAVING count(*) = 1) o),
		(SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM snooze_effects GROUP BY job_id) d),
		(SELECT count(*) FROM snooze_runs),
		(SELECT count(*) FROM (SELECT 1 FROM snooze_runs GROUP BY job_id, snoozes HAVING count(*) > 1) a),
		(SELECT count(*) FROM snooze_runs WHERE delivery > 1),
		(SELECT count(*) FROM snooze_effects WHERE delivery > 1)`).Scan(
		&res.Once, &res.Double, &res.Runs, &res.RunsAgain, &res.Deliveries2, &res.FinalDeliveries2)
	if err != nil {
		return err
	}
	var seen int
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT job_id) FROM snooze_effects").Scan(&seen); err != nil {
		return err
	}
	res.Lost = snoozeJobs - seen
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	ends.Each(func(o kadm.ListedOffset) { res.Records += o.Offset })
	return nil
}

// snoozeProc is one snooze worker process.
type snoozeProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	killed bool
}

// startSnoozeWorker starts a snooze worker process and waits until its
// worker runs.
func startSnoozeWorker(ctx context.Context, seeds []string, group, topic, dbURL string) (*snoozeProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, snoozeWorkerCmd, "-brokers", strings.Join(seeds, ","), "-group", group, "-topic", topic, "-database", dbURL)
	p := &snoozeProc{cmd: cmd, stderr: new(bytes.Buffer)}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() { // ends when the process exits
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case line <- sc.Text():
			default:
			}
		}
		close(line)
	}()
	select {
	case l := <-line:
		if l == "RUNNING" {
			return p, nil
		}
		return nil, errors.Join(fmt.Errorf("snooze worker: %q", l), p.stop())
	case <-time.After(time.Minute):
		return nil, errors.Join(errors.New("snooze worker: not running after a minute"), p.stop())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), p.stop())
	}
}

// kill kills the process with SIGKILL, as a crash would.
func (p *snoozeProc) kill() {
	p.killed = true
	_ = p.cmd.Process.Kill()
}

// stop closes the process's stdin (its graceful stop), waits for it
// (killing it after burstStopTimeout) and returns its failure, if it
// was not killed.
func (p *snoozeProc) stop() error {
	_ = p.stdin.Close()
	t := time.AfterFunc(burstStopTimeout, func() { _ = p.cmd.Process.Kill() })
	err := p.cmd.Wait()
	t.Stop()
	if err != nil && !p.killed {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(p.stderr.String()))
	}
	return nil
}

// runSnoozeWorker is a snooze worker process: a worker with the claim
// middleware that snoozes each job snoozeTimes times through
// pgoutbox.Snoozer and then writes its effect. It prints "RUNNING" when
// it starts and stops gracefully when stdin reaches EOF or ctx ends.
func runSnoozeWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(snoozeWorkerCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "seed brokers, comma-separated")
	group := fs.String("group", "", "share group")
	topic := fs.String("topic", "", "job topic")
	dbURL := fs.String("database", "", "Postgres URL, its search_path the scenario's schema")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *brokers == "" || *group == "" || *topic == "" || *dbURL == "" {
		return errors.New("snooze-worker: -brokers, -group, -topic and -database are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with the process; EOF is the bench's stop signal
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	pool, err := newPool(ctx, *dbURL, "", snoozeConcurrency*2+4)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool)
	if err != nil {
		return err
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		return err
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if _, err := pool.Exec(ctx, "INSERT INTO snooze_runs VALUES ($1, $2, $3)", job.ID(), job.Snoozes(), job.DeliveryCount); err != nil {
			return err
		}
		if job.Snoozes() < snoozeTimes {
			return handler.Snooze(snoozeFor)
		}
		_, err := pgstore.Tx(ctx).Exec(ctx, "INSERT INTO snooze_effects VALUES ($1, $2, $3)", job.ID(), job.Snoozes(), job.DeliveryCount)
		return err
	})
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(worker.Brokers(strings.Split(*brokers, ",")...), worker.Group(*group), worker.Handle(*topic, claims(h)),
		worker.Concurrency(snoozeConcurrency), worker.SnoozeVia(pgoutbox.Snoozer(pool)),
		worker.ShutdownTimeout(5*time.Second), worker.Logger(log))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "RUNNING")
	return w.Run(ctx)
}
