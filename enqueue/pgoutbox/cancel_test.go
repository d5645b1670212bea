package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// The cancel of a produced job, end to end: a relay, a worker that claims
// its jobs with idempotency.Middleware on pgstore, and a handler that
// writes each run into ran_jobs through the claim's transaction, so that
// a run counts only when it committed.

// cancelWorld is a bundle with a share group, a worker's recorder and
// the handler's hooks.
type cancelWorld struct {
	*bundle
	group string
	obs   *shareqtest.Observer

	mu sync.Mutex
	// hook, when set, runs inside the claim, after the handler's
	// write, before the commit; its error fails the run.
	hook func(ctx context.Context, id string) error
}

func cancelSetup(t *testing.T) *cancelWorld {
	t.Helper()
	b := setup(t, 1)
	if _, err := b.pool.Exec(t.Context(), "CREATE TABLE ran_jobs (job_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &cancelWorld{bundle: b, group: b.cluster.Group(t), obs: new(shareqtest.Observer)}
}

// claimKey is the key the worker's claim middleware claims for job id.
func (w *cancelWorld) claimKey(id string) CancelOption {
	return ClaimKey(idempotency.Key(w.group, w.topic, id))
}

func (w *cancelWorld) setHook(f func(ctx context.Context, id string) error) {
	w.mu.Lock()
	w.hook = f
	w.mu.Unlock()
}

// startWorker runs a worker for w's topic and group until t ends.
func (w *cancelWorld) startWorker(t *testing.T) {
	t.Helper()
	store, err := pgstore.New(w.pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		t.Fatal(err)
	}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return handler.Permanent(errors.New("no claim transaction"))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO ran_jobs (job_id) VALUES ($1)", job.ID()); err != nil {
			return err
		}
		w.mu.Lock()
		hook := w.hook
		w.mu.Unlock()
		if hook != nil {
			return hook(ctx, job.ID())
		}
		return nil
	})
	wk, err := worker.New(
		worker.Brokers(w.cluster.Seeds...),
		worker.Group(w.group),
		worker.Handle(w.topic, claims(h)),
		worker.Observers(w.obs),
		worker.Logger(shareqtest.Logger()),
		worker.RetryBackoff(func(int32) time.Duration { return 10 * time.Millisecond }),
		worker.ShutdownTimeout(5*time.Second),
	)
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

// runs returns how many committed runs job id had.
func runs(t *testing.T, pool *pgxpool.Pool, id string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM ran_jobs WHERE job_id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// final waits for job id to finish for good and returns that event; it
// fails the test unless the job was ACCEPTed.
func (w *cancelWorld) final(t *testing.T, id string) shareqtest.Event {
	t.Helper()
	ev := w.obs.WaitJob(t, waitTimeout, id)
	if ev.Result.Ack != worker.AckAccept {
		t.Fatalf("job %s finished with %v, want ACCEPT; %s", id, ev.Result.Ack, shareqtest.Summary(w.obs.Events()))
	}
	return ev
}

// waitProduced waits until the relay produced job id.
func (w *cancelWorld) waitProduced(t *testing.T, id string) {
	t.Helper()
	waitFor(t, "job "+id+" produced", func() bool {
		var ok bool
		err := w.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM `+ProducedTable+` WHERE job_id = $1)`, id).Scan(&ok)
		return err == nil && ok
	})
}

// Cancel before the relay withdraws the job: it never reaches Kafka, the
// worker never sees it, and ClaimKey writes nothing.
func TestCancelBeforeTheRelayNeverProduces(t *testing.T) {
	t.Parallel()
	w := cancelSetup(t)
	gone := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "gone"}))
	if res, err := Cancel(t.Context(), w.pool, gone.ID, w.claimKey(gone.ID)); err != nil || res != CancelWithdrawn {
		t.Fatalf("Cancel before the relay = %v, %v; want withdrawn", res, err)
	}
	kept := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "kept"}))
	run(t, w.relay(t))
	w.startWorker(t)
	if ev := w.final(t, kept.ID); ev.Result.Outcome != worker.OutcomeSucceeded {
		t.Fatalf("kept job: %+v, want succeeded", ev.Result)
	}
	if n := total(t, w.cluster, w.topic); n != 1 {
		t.Fatalf("%d records in the topic, want only the kept job", n)
	}
	for _, e := range w.obs.Events() {
		if e.ID == gone.ID {
			t.Fatalf("the withdrawn job was delivered: %+v", e)
		}
	}
	var claims int
	if err := w.pool.QueryRow(t.Context(), "SELECT count(*) FROM shareq_processed_jobs WHERE key = $1", idempotency.Key(w.group, w.topic, gone.ID)).Scan(&claims); err != nil || claims != 0 {
		t.Fatalf("claim rows of the withdrawn job = %d, %v; want none", claims, err)
	}
}

// Cancel after the relay, before the worker: the job is delivered,
// ACCEPTed without running, and reported as cancelled. A second cancel
// says stopped again; without ClaimKey it says produced.
func TestCancelAfterTheRelayStopsTheJob(t *testing.T) {
	t.Parallel()
	w := cancelSetup(t)
	job := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "stopped"}))
	run(t, w.relay(t))
	w.waitProduced(t, job.ID)
	if res, err := Cancel(t.Context(), w.pool, job.ID); err != nil || res != CancelProduced {
		t.Fatalf("Cancel of a produced job without ClaimKey = %v, %v; want produced", res, err)
	}
	if res, err := Cancel(t.Context(), w.pool, job.ID, w.claimKey(job.ID)); err != nil || res != CancelStopped {
		t.Fatalf("Cancel of a produced job = %v, %v; want stopped", res, err)
	}
	if res, err := Cancel(t.Context(), w.pool, job.ID, w.claimKey(job.ID)); err != nil || res != CancelStopped {
		t.Fatalf("second Cancel = %v, %v; want stopped", res, err)
	}
	w.startWorker(t)
	ev := w.final(t, job.ID)
	if ev.Result.Outcome != worker.OutcomeCancelled || !ev.Result.Final || ev.Result.Err != nil || ev.Count != 1 {
		t.Fatalf("cancelled job reported as %+v (delivery %d), want cancelled, final, on delivery 1", ev.Result, ev.Count)
	}
	if n := runs(t, w.pool, job.ID); n != 0 {
		t.Fatalf("the cancelled job ran %d times", n)
	}
}

// Cancel after the job ran is too late, and says so; the job ran once.
func TestCancelAfterTheJobRanIsTooLate(t *testing.T) {
	t.Parallel()
	w := cancelSetup(t)
	job := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "done"}))
	run(t, w.relay(t))
	w.startWorker(t)
	if ev := w.final(t, job.ID); ev.Result.Outcome != worker.OutcomeSucceeded {
		t.Fatalf("job: %+v, want succeeded", ev.Result)
	}
	if res, err := Cancel(t.Context(), w.pool, job.ID, w.claimKey(job.ID)); err != nil || res != CancelTooLate {
		t.Fatalf("Cancel of a job that ran = %v, %v; want too-late", res, err)
	}
	if n := runs(t, w.pool, job.ID); n != 1 {
		t.Fatalf("the job ran %d times, want 1", n)
	}
}

// A cancel while the job runs (its claim inserted, not committed) waits
// for the run: when the run commits the cancel is too late; when it fails
// the cancel stops it and the retry is ACCEPTed as cancelled. Either way
// the job ran at most once, and it ran exactly when the cancel said too
// late.
func TestCancelWhileTheJobRuns(t *testing.T) {
	t.Parallel()
	for _, fails := range []bool{false, true} {
		t.Run(fmt.Sprintf("run fails %v", fails), func(t *testing.T) {
			t.Parallel()
			w := cancelSetup(t)
			job := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "racing"}))
			started, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			w.setHook(func(ctx context.Context, id string) error {
				first := false
				once.Do(func() { first = true })
				if !first {
					return nil
				}
				close(started)
				<-release
				if fails {
					return errors.New("upstream said 503")
				}
				return nil
			})
			run(t, w.relay(t))
			w.startWorker(t)
			<-started // the run's claim row is inserted, uncommitted
			conn, err := w.pool.Acquire(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			res := make(chan CancelResult, 1)
			go func() {
				c, err := Cancel(context.Background(), conn, job.ID, w.claimKey(job.ID))
				if err != nil {
					t.Error(err)
				}
				res <- c
			}()
			waitLocked(t, w.pool, conn.Conn().PgConn().PID(), "the cancel to wait for the run's claim")
			close(release)
			c := <-res
			ev := w.final(t, job.ID)
			switch want := map[bool]CancelResult{false: CancelTooLate, true: CancelStopped}[fails]; {
			case c != want:
				t.Fatalf("Cancel while the job runs = %v, want %v", c, want)
			case fails && (ev.Result.Outcome != worker.OutcomeCancelled || ev.Count != 2):
				t.Fatalf("retry after the cancel: %+v (delivery %d), want cancelled on delivery 2", ev.Result, ev.Count)
			case !fails && ev.Result.Outcome != worker.OutcomeSucceeded:
				t.Fatalf("run: %+v, want succeeded", ev.Result)
			}
			if n, want := runs(t, w.pool, job.ID), map[bool]int{false: 1, true: 0}[fails]; n != want {
				t.Fatalf("committed runs = %d, want %d", n, want)
			}
		})
	}
}

// A cancel that holds its uncommitted cancel row while the job starts:
// the worker's claim waits for it, and once the cancel commits the job is
// ACCEPTed as cancelled without running.
func TestJobStartWaitsForAnUncommittedCancel(t *testing.T) {
	t.Parallel()
	w := cancelSetup(t)
	job := enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "waits"}))
	run(t, w.relay(t))
	w.waitProduced(t, job.ID)
	tx, err := w.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if res, err := CancelTx(t.Context(), tx, job.ID, w.claimKey(job.ID)); err != nil || res != CancelStopped {
		t.Fatalf("CancelTx = %v, %v; want stopped", res, err)
	}
	var pid uint32
	if err := tx.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	w.startWorker(t)
	waitFor(t, "the worker's claim to wait for the cancel", func() bool {
		var waiting bool
		err := w.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waiting)
		return err == nil && waiting
	})
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ev := w.final(t, job.ID); ev.Result.Outcome != worker.OutcomeCancelled {
		t.Fatalf("job: %+v, want cancelled", ev.Result)
	}
	if n := runs(t, w.pool, job.ID); n != 0 {
		t.Fatalf("the cancelled job ran %d times", n)
	}
}

// Many jobs, each cancelled at once while the worker works through them: each
// job ran at most once, it ran exactly when its cancel said too late, and
// it was reported cancelled exactly when its cancel said stopped (or
// withdrawn jobs were never delivered).
func TestCancelRacingJobStarts(t *testing.T) {
	t.Parallel()
	w := cancelSetup(t)
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = enqueueJob(t, w.pool, enqueue.NewJob(w.topic, welcome{User: "u", N: i})).ID
	}
	run(t, w.relay(t))
	w.startWorker(t)
	// Cancel once the worker is under way, so that the cancels meet jobs
	// waiting, delivered, running and done.
	w.obs.WaitFor(t, waitTimeout, "the worker's first job", func(es []shareqtest.Event) bool { return len(es) > 0 })
	results := make([]CancelResult, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			c, err := Cancel(context.Background(), w.pool, id, w.claimKey(id))
			if err != nil {
				t.Error(err)
			}
			results[i] = c
		})
	}
	wg.Wait()
	count := map[CancelResult]int{}
	for i, id := range ids {
		c := results[i]
		count[c]++
		if c == CancelWithdrawn {
			continue
		}
		ev := w.final(t, id)
		ran := runs(t, w.pool, id)
		switch {
		case ran > 1:
			t.Errorf("job %s ran %d times", id, ran)
		case c == CancelTooLate && (ran != 1 || ev.Result.Outcome != worker.OutcomeSucceeded):
			t.Errorf("job %s: cancel too late, but ran %d times, outcome %v", id, ran, ev.Result.Outcome)
		case c == CancelStopped && (ran != 0 || ev.Result.Outcome != worker.OutcomeCancelled):
			t.Errorf("job %s: cancel stopped it, but ran %d times, outcome %v", id, ran, ev.Result.Outcome)
		case c != CancelTooLate && c != CancelStopped:
			t.Errorf("job %s: cancel = %v", id, c)
		}
	}
	for _, e := range w.obs.Events() {
		for i, id := range ids {
			if e.ID == id && results[i] == CancelWithdrawn {
				t.Errorf("withdrawn job %s was delivered", id)
			}
		}
	}
	t.Logf("cancel results: %v", count)
}

// ClaimKey("") is an error, as is a nil transaction; nothing is cancelled.
func TestCancelOptionsValidate(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	job := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "kept"}))
	if res, err := Cancel(t.Context(), b.pool, job.ID, ClaimKey("")); err == nil || err.Error() != "pgoutbox: ClaimKey: empty key" || res != CancelUnknown {
		t.Fatalf("Cancel with ClaimKey(\"\") = %v, %v", res, err)
	}
	if res, err := CancelTx(t.Context(), nil, job.ID); err == nil || res != CancelUnknown {
		t.Fatalf("CancelTx(nil tx) = %v, %v", res, err)
	}
	if n := rowCount(t, b.pool); n != 1 {
		t.Fatalf("%d rows in the outbox, want the job kept", n)
	}
}
