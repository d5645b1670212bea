package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// Snoozes through the outbox, end to end: a relay, and workers that
// claim their jobs with idempotency.Middleware on pgstore and keep their
// snoozed jobs' copies with pgoutbox.Snoozer. Each job snoozes
// snoozeTimes times and then writes its effect in the claim's
// transaction.
//
// A snooze goes to the Snoozer when it outlasts a minute, or when the
// worker held it for MaxHold: the tests snooze for snoozeFor with a
// MaxHold of snoozeMaxHold, so every snooze is held a moment and then
// copied into the outbox, due snoozeFor after the run. MaxHold bounds a
// run too: a handler's claim over TLS on a busy CI host took more than
// a second, and a run cut at MaxHold is delivered again.
const (
	snoozeTimes    = 3
	snoozeFor      = 4 * time.Second
	snoozeMaxHold  = 2500 * time.Millisecond
	snoozeJobs     = 30
	snoozeWorkerIn = "SHAREQ_PGOUTBOX_SNOOZE_WORKER" // "seeds|group|topic|database URL"
)

// snoozeTables are the tests' record of runs: every handler call (logged
// outside the claim, so snoozed runs count) and every committed effect
// (in the claim's transaction). Neither is unique: a double run shows.
const snoozeTables = `
CREATE TABLE snooze_runs (job_id text NOT NULL, snoozes int NOT NULL, delivery int NOT NULL);
CREATE TABLE snooze_effects (job_id text NOT NULL, snoozes int NOT NULL, delivery int NOT NULL)`

// snoozeWorker returns a worker of group on topic that snoozes each job
// snoozeTimes times and then writes its effect, keeping the copies in
// pool's outbox.
func snoozeWorker(pool *pgxpool.Pool, seeds []string, group, topic string, log *slog.Logger) (*worker.Worker, error) {
	store, err := pgstore.New(pool)
	if err != nil {
		return nil, err
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		return nil, err
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if _, err := pool.Exec(ctx, "INSERT INTO snooze_runs VALUES ($1, $2, $3)", job.ID(), job.Snoozes(), job.DeliveryCount); err != nil {
			return err
		}
		if job.Snoozes() < snoozeTimes {
			return handler.Snooze(snoozeFor)
		}
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return handler.Permanent(errors.New("no claim transaction"))
		}
		_, err := tx.Exec(ctx, "INSERT INTO snooze_effects VALUES ($1, $2, $3)", job.ID(), job.Snoozes(), job.DeliveryCount)
		return err
	})
	return worker.New(
		worker.Brokers(seeds...),
		worker.Group(group),
		worker.Handle(topic, claims(h)),
		worker.Concurrency(4),
		worker.SnoozeVia(Snoozer(pool)),
		worker.MaxHold(snoozeMaxHold),
		worker.ShutdownTimeout(5*time.Second),
		worker.Logger(log),
	)
}

// runSnoozeWorker makes the test binary a snooze worker when
// startSnoozeWorker started it as one; it then never returns. It prints
// "RUNNING" once its worker runs.
func runSnoozeWorker() {
	v := os.Getenv(snoozeWorkerIn)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	// Bounded, should the parent die without killing it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(parts[3])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	cfg.MaxConns = 10 // the claims of 4 jobs, the handlers' logs, the copies
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	w, err := snoozeWorker(pool, strings.Split(parts[0], ","), parts[1], parts[2],
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("RUNNING")
	fmt.Println("ERR Run returned", w.Run(ctx))
	os.Exit(3)
}

// snoozeWorld is a bundle with the tables of the runs, a share group and
// a relay running.
type snoozeWorld struct {
	*bundle
	group string
}

func snoozeSetup(t *testing.T) *snoozeWorld {
	t.Helper()
	b := setup(t, 3)
	if _, err := b.pool.Exec(t.Context(), snoozeTables); err != nil {
		t.Fatal(err)
	}
	run(t, b.relay(t))
	return &snoozeWorld{bundle: b, group: b.cluster.Group(t)}
}

// enqueue commits n jobs through the outbox and returns their IDs.
func (w *snoozeWorld) enqueue(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	inTx(t, w.pool, func(tx pgx.Tx) {
		jobs := make([]enqueue.Job, n)
		for i := range jobs {
			jobs[i] = enqueue.NewJob(w.topic, welcome{User: fmt.Sprint("u", i), N: i})
		}
		var err error
		if ids, err = EnqueueManyTx(t.Context(), tx, jobs...); err != nil {
			t.Fatal(err)
		}
	})
	return ids
}

// startWorker runs a snooze worker in this process until t ends (or the
// returned stop).
func (w *snoozeWorld) startWorker(t *testing.T) {
	t.Helper()
	wk, err := snoozeWorker(w.pool, w.cluster.Seeds, w.group, w.topic, shareqtest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, wk.Run)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
}

// count runs a count(*) query.
func (w *snoozeWorld) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// settle waits until every job's effect committed, the outbox is empty
// and the group has acknowledged every record: no run can come after.
func (w *snoozeWorld) settle(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d effects", n), func() bool {
		return w.count(t, "SELECT count(DISTINCT job_id) FROM snooze_effects") >= n
	})
	waitFor(t, "the outbox empty and the group's lag 0", func() bool {
		return rowCount(t, w.pool) == 0 && w.lagZero(t)
	})
}

// lagZero reports whether the group has acknowledged every record of
// the topic.
func (w *snoozeWorld) lagZero(t *testing.T) bool {
	d, err := w.cluster.Admin().DescribeShareGroupOffsets(t.Context(), w.group)
	if err != nil || d[w.group].Err != nil {
		return false
	}
	offs := d[w.group].Offsets[w.topic]
	for _, o := range offs {
		if o.Err != nil || o.Lag != 0 {
			return false
		}
	}
	return len(offs) > 0
}

// checkOnce fails t unless each of ids has exactly one effect, after
// its snoozeTimes snoozes, every snooze count ran, and the relay
// produced each job's copies once: a copy written twice would be a
// record more.
func (w *snoozeWorld) checkOnce(t *testing.T, ids []string) {
	t.Helper()
	if n := total(t, w.cluster, w.topic); n != int64(len(ids)*(snoozeTimes+1)) {
		t.Errorf("%d records; want %d, each job and its %d copies", n, len(ids)*(snoozeTimes+1), snoozeTimes)
	}
	if n := w.count(t, "SELECT count(*) FROM snooze_effects"); n != len(ids) {
		t.Errorf("%d effects; want %d, one per job", n, len(ids))
	}
	if n := w.count(t, fmt.Sprintf("SELECT count(*) FROM snooze_effects WHERE snoozes <> %d", snoozeTimes)); n != 0 {
		t.Errorf("%d effects after other than %d snoozes", n, snoozeTimes)
	}
	for _, id := range ids {
		var effects int
		var seen []int32
		if err := w.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM snooze_effects WHERE job_id = $1),
			coalesce((SELECT array_agg(DISTINCT snoozes ORDER BY snoozes) FROM snooze_runs WHERE job_id = $1), '{}')`, id).Scan(&effects, &seen); err != nil {
			t.Fatal(err)
		}
		if effects != 1 || fmt.Sprint(seen) != "[0 1 2 3]" {
			t.Errorf("job %s: %d effects, runs with snooze counts %v; want 1 effect after runs 0 1 2 3", id, effects, seen)
		}
	}
}

// Jobs snoozed three times through the outbox run their effect once,
// every run on the first delivery of its record, counting its snoozes.
func TestSnoozedJobsRunOnceThroughTheOutbox(t *testing.T) {
	t.Parallel()
	w := snoozeSetup(t)
	ids := w.enqueue(t, snoozeJobs)
	w.startWorker(t)
	w.settle(t, len(ids))
	w.checkOnce(t, ids)
	if n := w.count(t, "SELECT count(*) FROM snooze_runs"); n != len(ids)*(snoozeTimes+1) {
		t.Errorf("%d runs; want %d, each job's %d snoozed runs and its last", n, len(ids)*(snoozeTimes+1), snoozeTimes)
	}
	if n := w.count(t, "SELECT count(*) FROM snooze_runs WHERE delivery <> 1"); n != 0 {
		t.Errorf("%d runs on a delivery past the first; want 0: a snooze spends no delivery", n)
	}
	if n := w.count(t, "SELECT count(*) FROM "+UniqueTable+" WHERE key LIKE 'shareq-snooze:%'"); n != len(ids)*snoozeTimes {
		t.Errorf("%d copies' keys; want %d, one per snooze", n, len(ids)*snoozeTimes)
	}
}

// A worker killed with SIGKILL mid-way, with jobs running, held and
// being copied, loses none and runs none twice: its records come back
// to the next worker, whose copies of them the outbox refuses, and whose
// runs of jobs already done the claim skips.
func TestSnoozedJobsSurviveAWorkerKill(t *testing.T) {
	t.Parallel()
	w := snoozeSetup(t)
	ids := w.enqueue(t, snoozeJobs)
	lines, kill := kafkatest.StartChild(t, fmt.Sprintf("%s=%s|%s|%s|%s", snoozeWorkerIn,
		strings.Join(w.cluster.Seeds, ","), w.group, w.topic, pgtest.SchemaURL(t, w.schema)))
	if l := <-lines; l != "RUNNING" {
		t.Fatalf("snooze worker: %q", l)
	}
	// Mid-way: about half of the jobs' runs done, copies waiting in the
	// outbox.
	waitFor(t, "the worker to be mid-way", func() bool {
		return w.count(t, "SELECT count(*) FROM snooze_runs") >= len(ids)*(snoozeTimes+1)/2
	})
	kill()
	before := w.count(t, "SELECT count(*) FROM snooze_runs")
	w.startWorker(t)
	w.settle(t, len(ids))
	w.checkOnce(t, ids)
	var again, late, maxDelivery int
	if err := w.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM snooze_runs GROUP BY job_id, snoozes HAVING count(*) > 1) d),
		(SELECT count(*) FROM snooze_runs WHERE delivery > 1),
		(SELECT coalesce(max(delivery), 0) FROM snooze_runs)`).Scan(&again, &late, &maxDelivery); err != nil {
		t.Fatal(err)
	}
	if maxDelivery > 2 {
		t.Errorf("a run on delivery %d; want at most 2 (one kill)", maxDelivery)
	}
	t.Logf("%d runs before the kill; %d snoozes run again and %d runs on a second delivery (the killed worker's records)", before, again, late)
}

// A snooze longer than a minute goes to the outbox at once, due when it
// ends, and the original is accepted.
func TestLongSnoozeWaitsInTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	group := b.cluster.Group(t)
	ids := enqueueN(t, b.pool, b.topic, 1, 1)
	run(t, b.relay(t))
	h := handler.Func(func(context.Context, *handler.Job) error { return handler.Snooze(time.Hour) })
	start := time.Now()
	wk, err := worker.New(worker.Brokers(b.cluster.Seeds...), worker.Group(group), worker.Handle(b.topic, h),
		worker.SnoozeVia(Snoozer(b.pool)), worker.Logger(shareqtest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, wk.Run)
	w := &snoozeWorld{bundle: b, group: group}
	waitFor(t, "the copy in the outbox and the original accepted", func() bool {
		return rowCount(t, b.pool) == 1 && total(t, b.cluster, b.topic) == 1 && w.lagZero(t)
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var id string
	var due time.Time
	var hs []string
	if err := b.pool.QueryRow(t.Context(), "SELECT job_id, due_at, header_keys FROM "+Table).Scan(&id, &due, &hs); err != nil {
		t.Fatal(err)
	}
	if id != ids[0] || due.Sub(start) < time.Hour-time.Minute || due.Sub(start) > time.Hour+time.Minute {
		t.Errorf("copy of %s due %v after the run; want %s due an hour after it", id, due.Sub(start), ids[0])
	}
	if want := []string{handler.JobIDHeader, handler.SnoozesHeader, handler.NotBeforeHeader}; fmt.Sprint(hs) != fmt.Sprint(want) {
		t.Errorf("copy's headers %q; want %q", hs, want)
	}
}
