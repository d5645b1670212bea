package pgjoblog

// The job log's measurements (issue 34): what it costs a worker at a
// steady rate, how fast one job's runs are found among millions, what
// dropping a day costs, and what a Postgres outage under load does. They
// run long and load the machine, so only on request:
//
//	SHAREQ_JOBLOG_MEASURE=1 SHAREQ_TEST_BROKERS=127.0.0.1:$KAFKA_PORT \
//	SHAREQ_TEST_DATABASE_URL=... go test -run TestMeasure -v -timeout 60m ./joblog/pgjoblog
//
// SHAREQ_JOBLOG_ROWS sets the rows of the lookup (default 10,000,000).
// The figures are in docs/job-log.md.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/procstat"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

func measuring(t *testing.T) {
	t.Helper()
	if os.Getenv("SHAREQ_JOBLOG_MEASURE") == "" {
		t.Skip("a measurement: set SHAREQ_JOBLOG_MEASURE=1 (see measure_test.go)")
	}
}

// cpuClock reads this process's CPU time and that of the Postgres
// cluster behind pool (its postmaster and the backends running).
type cpuClock struct{ postmaster int }

func newCPUClock(t *testing.T, pool *pgxpool.Pool) cpuClock {
	t.Helper()
	var backend int
	if err := pool.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	pm, err := procstat.Parent(backend)
	if err != nil {
		t.Fatalf("the postmaster of backend %d (is Postgres on this machine?): %v", backend, err)
	}
	return cpuClock{postmaster: pm}
}

func (c cpuClock) read(t *testing.T) (self, pg time.Duration) {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	pg, err := procstat.TreeCPU(c.postmaster)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), pg
}

// steadyRun is one run of no-op jobs produced at a steady rate.
type steadyRun struct {
	jobs      int64
	took      time.Duration
	self, pg  time.Duration // CPU: this process (worker, producer, client), Postgres
	rowsAfter int64         // rows the log holds at the end (with the log)
}

// runSteady produces rate no-op jobs a second for d to a worker observed
// by obs, and measures the CPU used from the first produce to the last
// job's end.
func runSteady(t *testing.T, c *kafkatest.Cluster, clock cpuClock, rate int, d time.Duration, obs ...worker.Observer) steadyRun {
	t.Helper()
	topic, group := c.Topic(t, 6), c.Group(t)
	var done atomic.Int64
	nop := handler.Func(func(context.Context, *handler.Job) error { done.Add(1); return nil })
	opts := []worker.Option{worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
		worker.Concurrency(100), worker.Logger(shareqtest.Logger())}
	if len(obs) > 0 {
		opts = append(opts, worker.Observers(obs...))
	}
	w, err := worker.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	// Warm up: the worker joined and ran a job.
	cl := c.Client(t)
	produce := func(id string) {
		cl.Produce(t.Context(), jobRecord(topic, id), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	produce("warm")
	waitFor(t, "the warm-up job", func() bool { return done.Load() == 1 })

	self0, pg0 := clock.read(t)
	began := time.Now()
	const tick = 10 * time.Millisecond
	per := rate * int(tick) / int(time.Second)
	n := 0
	for at := began; time.Since(began) < d; at = at.Add(tick) {
		time.Sleep(time.Until(at))
		for range per {
			n++
			produce("j" + strconv.Itoa(n))
		}
	}
	waitFor(t, "every job done", func() bool { return done.Load() == int64(n)+1 })
	took := time.Since(began)
	self1, pg1 := clock.read(t)
	return steadyRun{jobs: int64(n), took: took, self: self1 - self0, pg: pg1 - pg0}
}

// The job log's cost at a steady 1,000 and 5,000 no-op jobs a second: CPU
// per job of this process (the worker, its client and the producer) and
// of Postgres, without and with the log, in the same run, three times
// each in turn; the ratios' medians are logged. Postgres's CPU is its
// postmaster's and backends': give the measurement a Postgres of its own.
func TestMeasureJobLogCost(t *testing.T) {
	measuring(t)
	c := kafkatest.New(t)
	pool := migrated(t)
	clock := newCPUClock(t, pool)
	const d, reps = 20 * time.Second, 3
	per := func(r steadyRun, cpu time.Duration) float64 { return float64(cpu.Microseconds()) / float64(r.jobs) }
	for _, rate := range []int{1000, 5000} {
		var own, all []float64
		for range reps {
			base := runSteady(t, c, clock, rate, d)
			l, err := New(pool)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- l.Run(ctx) }()
			with := runSteady(t, c, clock, rate, d, l)
			cancel()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
			own = append(own, per(with, with.self)/per(base, base.self))
			all = append(all, per(with, with.self+with.pg)/per(base, base.self+base.pg))
			t.Logf("%s %s, %d jobs/s offered for %v: without the log %d jobs in %v, CPU %.1f µs/job (+ Postgres %.1f); with it %d jobs in %v, CPU %.1f µs/job (+ Postgres %.1f); dropped %d",
				c.Kind, c.Version, rate, d,
				base.jobs, base.took.Round(time.Millisecond), per(base, base.self), per(base, base.pg),
				with.jobs, with.took.Round(time.Millisecond), per(with, with.self), per(with, with.pg), l.Dropped())
		}
		slices.Sort(own)
		slices.Sort(all)
		t.Logf("%s %s, %d jobs/s: with the log, this process's CPU per job %.3f× (median of %d; %.3f–%.3f), with Postgres's %.3f× (%.3f–%.3f)",
			c.Kind, c.Version, rate, own[reps/2], reps, own[0], own[reps-1], all[reps/2], all[0], all[reps-1])
	}
}

// One job's runs found among SHAREQ_JOBLOG_ROWS (10,000,000) runs logged
// over 7 days: p50 and p99 of Runs over 1,000 random job IDs; then the
// oldest day's partition dropped by the retention, timed.
func TestMeasureJobLogLookupAndRetention(t *testing.T) {
	measuring(t)
	rows := 10_000_000
	if s := os.Getenv("SHAREQ_JOBLOG_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SHAREQ_JOBLOG_ROWS=%q: %v", s, err)
		}
	}
	pool := migrated(t)
	ctx := t.Context()
	now := time.Now().UTC()
	l, err := New(pool, Retention(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for d := 0; d <= 7; d++ {
		if err := l.keepPartitions(ctx, now.AddDate(0, 0, -d)); err != nil {
			t.Fatal(err)
		}
	}
	// Rows i = 0..rows-1: job "job-i", one run each, ended i×(7 days/rows)
	// ago, spread over 6 partitions, 60 partitions of the topic.
	began := time.Now()
	const chunk = 500_000
	for from := 0; from < rows; from += chunk {
		to := min(from+chunk, rows) - 1
		_, err := pool.Exec(ctx, `INSERT INTO shareq_job_runs (job_id, topic, partition, "offset", delivery_count, outcome, ack,
			started_at, ended_at, duration_us, worker)
			SELECT 'job-' || i, 'bench', i % 60, i / 60, 1, 'ok', 'accept',
				$1::timestamptz - (i * $2::float8) * interval '1 microsecond' - interval '3 ms',
				$1::timestamptz - (i * $2::float8) * interval '1 microsecond', 3000, 'bench-worker'
			FROM generate_series($3::bigint, $4::bigint) AS i`,
			now, float64((6*24*time.Hour).Microseconds())/float64(rows), from, to)
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE shareq_job_runs"); err != nil {
		t.Fatal(err)
	}
	t.Logf("inserted %d runs over 6 days in %v", rows, time.Since(began).Round(time.Second))

	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 1000)
	for i := range lat {
		id := "job-" + strconv.Itoa(rng.IntN(rows))
		t0 := time.Now()
		runs, err := l.Runs(ctx, id)
		lat[i] = time.Since(t0)
		if err != nil || len(runs) != 1 {
			t.Fatalf("Runs(%s): %d runs, %v", id, len(runs), err)
		}
	}
	slices.Sort(lat)
	t.Logf("Runs of one job among %d: p50 %v, p99 %v, max %v (1,000 lookups)", rows, lat[500], lat[990], lat[999])

	// The retention: a day's partition past it dropped.
	var oldest string
	var inOldest int64
	if err := pool.QueryRow(ctx, `SELECT c.relname, c.reltuples::bigint FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'shareq_job_runs'::regclass AND c.reltuples > 0 ORDER BY c.relname LIMIT 1`).Scan(&oldest, &inOldest); err != nil {
		t.Fatal(err)
	}
	day, err := time.Parse("20060102", oldest[len(table)+1:])
	if err != nil {
		t.Fatal(err)
	}
	short, err := New(pool, Retention(now.Sub(day.AddDate(0, 0, 1))-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := short.keepPartitions(ctx, now); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	var gone bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NULL", oldest).Scan(&gone); err != nil || !gone {
		t.Fatalf("partition %s still there after the retention (%v)", oldest, err)
	}
	t.Logf("retention: partition %s (about %d runs) dropped in %v", oldest, inOldest, took.Round(time.Millisecond))
}

// A Postgres outage of 30 s under a steady 1,000 jobs a second: the log
// writes through a proxy that refuses connections and cuts those open for
// 30 s. The worker keeps running its jobs at the offered rate; after the
// outage the log catches up; what it holds at the end is every run but
// those its buffer dropped (counted: Log.Dropped).
func TestMeasureJobLogPostgresOutage(t *testing.T) {
	measuring(t)
	c := kafkatest.New(t)
	direct := migrated(t)
	var schema string
	if err := direct.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	cfg := direct.Config().Copy()
	proxy := cutproxy.New(t, fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), false)
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	viaProxy, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	l, err := New(viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)

	topic, group := c.Topic(t, 6), c.Group(t)
	var done atomic.Int64
	nop := handler.Func(func(context.Context, *handler.Job) error { done.Add(1); return nil })
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
		worker.Concurrency(100), worker.Observers(l), worker.Logger(shareqtest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.Run(t, w.Run)
	cl := c.Client(t)
	n := 0
	produceFor := func(d time.Duration) {
		began := time.Now()
		for at := began; time.Since(began) < d; at = at.Add(10 * time.Millisecond) {
			time.Sleep(time.Until(at))
			for range 10 {
				n++
				cl.Produce(t.Context(), jobRecord(topic, "j"+strconv.Itoa(n)), nil)
			}
		}
	}
	produceFor(10 * time.Second)
	before := done.Load()
	proxy.Cut()
	cutAt := time.Now()
	produceFor(30 * time.Second)
	during := done.Load() - before
	logged := func() int64 {
		var rows int64
		if err := direct.QueryRow(t.Context(), "SELECT count(*) FROM shareq_job_runs").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	stuck := logged()
	proxy.Restore()
	backAt := time.Now()
	waitFor(t, "the log writing again", func() bool { return logged() > stuck })
	writing := time.Since(backAt)
	produceFor(10 * time.Second)
	waitFor(t, "every job done", func() bool { return done.Load() == int64(n) })
	waitFor(t, "every run logged or counted dropped", func() bool { return logged()+l.Dropped() >= int64(n) })
	rows := logged()
	if rows+l.Dropped() != int64(n) {
		t.Errorf("the log holds %d runs and dropped %d, of %d run: %d unaccounted for", rows, l.Dropped(), n, int64(n)-rows-l.Dropped())
	}
	t.Logf("%s %s: 1,000 jobs/s, Postgres cut off for %v: the worker ran %d jobs meanwhile (%.0f/s); the log wrote again %v after it was back and holds %d of %d runs, %d dropped by its buffer of %d (as documented); schema %s",
		c.Kind, c.Version, backAt.Sub(cutAt).Round(time.Millisecond), during, float64(during)/backAt.Sub(cutAt).Seconds(),
		writing.Round(time.Millisecond), rows, n, l.Dropped(), BufferDefault, schema)
}
