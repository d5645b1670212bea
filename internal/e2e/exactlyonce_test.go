package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// The side effect of every test here is one thumbnails row per job,
// written through the claim's transaction behind idempotency.Middleware on
// pgstore. Each test forces jobs to be delivered again after their claim
// committed, in one of the ways that happen in production, and checks that
// every job's row exists exactly once and that the extra deliveries were
// suppressed as duplicates.

// checkOnce fails t unless each of ids has exactly one thumbnails row and
// one claim row, and there are no others.
func checkOnce(t *testing.T, e *env, ids []string) {
	t.Helper()
	rows := e.db.rowsPerJob(t)
	var missing, twice []string
	for _, id := range ids {
		switch n := rows[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s×%d", id, n))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d jobs have no thumbnails row: %s", len(missing), len(ids), abbrev(missing))
	}
	if len(twice) > 0 {
		t.Errorf("%d jobs have more than one thumbnails row: %s", len(twice), abbrev(twice))
	}
	if len(rows) > len(ids)-len(missing) {
		t.Errorf("thumbnails rows for %d jobs, want %d", len(rows), len(ids))
	}
	if n := e.db.claims(t); n != len(ids) {
		t.Errorf("%d claim rows, want %d", n, len(ids))
	}
}

// abbrev lists the first few of ss.
func abbrev(ss []string) string {
	if len(ss) > 8 {
		return strings.Join(ss[:8], " ") + fmt.Sprintf(" … (%d more)", len(ss)-8)
	}
	return strings.Join(ss, " ")
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = jobID(i)
	}
	return out
}

// A producer that retries a send writes a job twice, both copies with the
// job's shareq-job-id. The claim is keyed on it, so the handler runs once
// and the other copy is accepted as a duplicate. Half the jobs have their
// copies back to back, so the worker usually holds both at once and the
// second claim waits on the first one's uncommitted row; the other half's
// second copies come after every first copy.
func TestDuplicateProduceRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)
	const n = 40
	var order []string
	for i := range n / 2 {
		order = append(order, jobID(i), jobID(i))
	}
	for range 2 {
		for i := n / 2; i < n; i++ {
			order = append(order, jobID(i))
		}
	}
	e.produce(t, order...)

	var dups atomic.Int64
	th := newThumbnailer(20 * time.Millisecond)
	pool := e.db.connect(t, "", 10)
	e.start(t, th, worker.Use(claimsMiddleware(t, pool, &dups)), worker.Concurrency(8))

	es := e.obs.WaitFor(t, 60*time.Second, "both copies of every job accepted", func(es []event) bool {
		return countAck(es, worker.AckAccept) >= 2*n
	})
	if r, j := countAck(es, worker.AckRelease), countAck(es, worker.AckReject); r != 0 || j != 0 {
		t.Errorf("%d releases and %d rejects, want none: %s", r, j, shareqtest.Summary(es))
	}
	for _, id := range ids(n) {
		if got := th.ran(id); len(got) != 1 {
			t.Errorf("handler ran job %s %d times (deliveries %v), want once", id, len(got), got)
		}
	}
	if got := dups.Load(); got != n {
		t.Errorf("OnDuplicate called %d times, want %d (one per second copy)", got, n)
	}
	checkOnce(t, e, ids(n))
	t.Logf("%s: %d records of %d jobs, handler runs %d, duplicates suppressed %d", e.c.Kind, 2*n, n, th.totalRuns(), dups.Load())
}

// A middleware outside the claim fails after the claim committed (a step
// after the side effect, such as a notification, failed): the record is
// RELEASEd although its side effect is durable. The redelivery finds the
// claim and is accepted without running the handler.
func TestReleasedAfterCommitRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	const n = 20
	e.produce(t, ids(n)...)

	afterCommit := func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			err := next.Handle(ctx, job)
			if err == nil && job.DeliveryCount == 1 {
				return handler.Retry("notify", errors.New("e2e: notification after the commit failed"))
			}
			return err
		})
	}
	var dups atomic.Int64
	th := newThumbnailer(10 * time.Millisecond)
	pool := e.db.connect(t, "", 10)
	e.start(t, th, worker.Use(afterCommit, claimsMiddleware(t, pool, &dups)), worker.Concurrency(4))

	es := e.obs.WaitFor(t, 60*time.Second, "every job accepted", func(es []event) bool {
		return len(acked(es)) == n
	})
	for _, id := range ids(n) {
		var got []string
		for _, ev := range es {
			if ev.ID == id {
				got = append(got, fmt.Sprintf("%v#%d", ev.Result.Ack, ev.Count))
			}
		}
		if want := fmt.Sprint([]string{worker.AckRelease.String() + "#1", worker.AckAccept.String() + "#2"}); fmt.Sprint(got) != want {
			t.Errorf("job %s acknowledged %v, want %s", id, got, want)
		}
		if runs := th.ran(id); len(runs) != 1 || runs[0] != 1 {
			t.Errorf("handler ran job %s on deliveries %v, want [1]", id, runs)
		}
	}
	if got := dups.Load(); got != n {
		t.Errorf("OnDuplicate called %d times, want %d (every redelivery)", got, n)
	}
	checkOnce(t, e, ids(n))
	t.Logf("%s: %d jobs, %d released after commit, handler runs %d, duplicates suppressed %d",
		e.c.Kind, n, countAck(es, worker.AckRelease), th.totalRuns(), dups.Load())
}

// A worker is stopped with a zero ShutdownTimeout while jobs run: every
// running job is cancelled and RELEASEd. One job ("held") had committed its
// claim and was still in a middleware outside it; others were anywhere in
// their run, some in their COMMIT. A second worker finishes them all:
// the held job is a duplicate, the rest run again from scratch, and each
// job's row exists once.
func TestStoppedAfterCommitRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	const n = 60
	all := append([]string{"held"}, ids(n)...)
	e.produce(t, all...)

	held := make(chan struct{})
	var heldOnce sync.Once
	// tail runs after the claim committed: the held job waits there until
	// the worker cancels it; the others linger a little, so some of them
	// are also past their commit when the worker stops.
	tail := func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			err := next.Handle(ctx, job)
			if err != nil {
				return err
			}
			if job.ID() == "held" {
				heldOnce.Do(func() { close(held) })
				<-ctx.Done()
				return nil
			}
			select {
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})
	}
	var dups atomic.Int64
	th := newThumbnailer(20 * time.Millisecond)
	pool := e.db.connect(t, "", 10)
	claims := claimsMiddleware(t, pool, &dups)
	stop := e.start(t, th, worker.Use(tail, claims), worker.Concurrency(6), worker.ShutdownTimeout(0))
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the held job did not commit within 60s; %s", shareqtest.Summary(e.obs.Events()))
	}
	if err := stop(); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	first := e.obs.Events()
	var shutdown int
	for _, ev := range first {
		if errors.Is(ev.Result.Err, worker.ErrShutdown) {
			shutdown++
			if ev.Result.Ack != worker.AckRelease {
				t.Errorf("job %s stopped by shutdown was acknowledged %v, want RELEASE", ev.ID, ev.Result.Ack)
			}
		}
	}
	if rows := e.db.rowsPerJob(t); rows["held"] != 1 {
		t.Fatalf("held job has %d rows after its commit, want 1", rows["held"])
	}

	e.start(t, th, worker.Use(claims), worker.Concurrency(6))
	es := e.obs.WaitFor(t, 60*time.Second, "every job accepted", func(es []event) bool {
		return len(acked(es)) == len(all)
	})
	if runs := th.ran("held"); len(runs) != 1 {
		t.Errorf("handler ran the held job on deliveries %v, want once", runs)
	}
	// The held job was released at shutdown on delivery 1 and accepted,
	// without running, on a later one. Usually that is delivery 2, but a
	// delivery may be spent without reaching a handler (a fetch in flight
	// of another member, or a lock that ran out while it was released).
	var heldEvs []event
	for _, ev := range es {
		if ev.ID == "held" {
			heldEvs = append(heldEvs, ev)
		}
	}
	if len(heldEvs) != 2 || heldEvs[0].Count != 1 || heldEvs[0].Result.Ack != worker.AckRelease || !errors.Is(heldEvs[0].Result.Err, worker.ErrShutdown) ||
		heldEvs[1].Result.Ack != worker.AckAccept || heldEvs[1].Count < 2 {
		t.Errorf("held job: %s; want a RELEASE on delivery 1 at shutdown, then one ACCEPT", shareqtest.Summary(heldEvs))
	}
	if dups.Load() < 1 {
		t.Errorf("OnDuplicate called %d times, want at least 1 (the held job)", dups.Load())
	}
	checkOnce(t, e, all)
	t.Logf("%s: %d jobs, %d released at shutdown, handler runs %d, duplicates suppressed %d, held job accepted on delivery %d",
		e.c.Kind, len(all), shutdown, th.totalRuns(), dups.Load(), heldEvs[len(heldEvs)-1].Count)
}

// The worker process dies (SIGKILL) after a job's claim committed and
// before its ACCEPT reached the broker. The broker delivers the job again
// when its lock runs out; the next worker finds the claim and accepts it
// without running the handler.
func TestCrashAfterCommitRunsOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	e.produce(t, jobID(0))

	id, count := runCrashWorker(t, e)
	if id != jobID(0) || count != 1 {
		t.Fatalf("crash worker committed %s on delivery %d, want %s on 1", id, count, jobID(0))
	}
	if rows := e.db.rowsPerJob(t); rows[id] != 1 {
		t.Fatalf("after the crash, job %s has %d rows, want 1 (committed before the kill)", id, rows[id])
	}

	var dups atomic.Int64
	th := newThumbnailer(0)
	pool := e.db.connect(t, "", 4)
	e.start(t, th, worker.Use(claimsMiddleware(t, pool, &dups)), worker.Concurrency(2))
	// The lock of the dead member's record runs out within a lock duration.
	es := e.obs.WaitFor(t, e.c.LockDuration+e.c.LockSweep+30*time.Second, "the redelivered job accepted", func(es []event) bool {
		return acked(es)[id]
	})
	if len(es) != 1 || es[0].Count != 2 {
		t.Errorf("second worker saw %s, want one ACCEPT on delivery 2", shareqtest.Summary(es))
	}
	if runs := th.ran(id); len(runs) != 0 {
		t.Errorf("second worker ran the handler on deliveries %v, want never", runs)
	}
	if dups.Load() != 1 {
		t.Errorf("OnDuplicate called %d times, want 1", dups.Load())
	}
	checkOnce(t, e, []string{id})
	t.Logf("%s: crashed after commit; redelivered as #%d, duplicates suppressed %d", e.c.Kind, es[0].Count, dups.Load())
}

// The crash worker is this test binary run again with crashWorkerEnv set
// to a crashConfig: it runs a worker with the claim middleware, prints
// "COMMITTED <id> <delivery>" when a job's claim has committed, and then
// holds that job, unacknowledged, until it is killed.
const crashWorkerEnv = "SHAREQ_E2E_CRASH_WORKER"

type crashConfig struct {
	Seeds  []string
	Group  string
	Topic  string
	DBURL  string
	Schema string
	// Batch, when positive, runs the jobs in batches of Batch instead
	// (crashBatch).
	Batch   int
	Verbose bool
}

func crashWorker() {
	die := func(err error) {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	var cfg crashConfig
	if err := json.Unmarshal([]byte(os.Getenv(crashWorkerEnv)), &cfg); err != nil {
		die(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(cfg.DBURL)
	if err != nil {
		die(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = cfg.Schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		die(err)
	}
	hold := func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			if err := next.Handle(ctx, job); err != nil {
				return err
			}
			fmt.Printf("COMMITTED %s %d\n", job.ID(), job.DeliveryCount)
			time.Sleep(time.Hour) // killed here, between the commit and the ACCEPT
			return nil
		})
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	h, mws, concurrency, err := crashHandler(ctx, pool, cfg.Batch)
	if err != nil {
		die(err)
	}
	w, err := worker.New(worker.Brokers(cfg.Seeds...), worker.Group(cfg.Group),
		worker.Handle(cfg.Topic, h), worker.Use(append([]handler.Middleware{hold}, mws...)...),
		worker.Concurrency(concurrency), worker.Logger(logger))
	if err != nil {
		die(err)
	}
	die(fmt.Errorf("worker stopped: %v", w.Run(ctx)))
}

// crashHandler returns the crash worker's handler, the middleware that
// goes inside hold and the worker's concurrency: the thumbnailer behind
// idempotency.Middleware, one job at a time; or, for batch > 0, batches
// of batch behind idempotency.Batch, two at a time, whose second batch
// prints "MIDBATCH <jobs>" once its rows are written and then waits, its
// transaction open, to be killed.
func crashHandler(ctx context.Context, pool *pgxpool.Pool, batch int) (handler.Handler, []handler.Middleware, int, error) {
	var dups atomic.Int64
	if batch <= 0 {
		claims, err := newClaims(ctx, pool, &dups)
		return newThumbnailer(0), []handler.Middleware{claims}, 1, err
	}
	th := newThumbnailer(0)
	var calls atomic.Int32
	fn, err := newBatchClaims(ctx, pool, &dups, func(ctx context.Context, jobs []*handler.Job) []error {
		errs := th.HandleBatch(ctx, jobs)
		if calls.Add(1) == 2 {
			fmt.Printf("MIDBATCH %d\n", len(jobs))
			time.Sleep(time.Hour) // killed here, the batch's rows written and not committed
		}
		return errs
	})
	return handler.Batch(batch, 5*time.Second, fn), nil, 2 * batch, err
}

// runCrashWorker runs a crash worker on e's topic and group, waits for it
// to commit a job, kills it with SIGKILL and returns the job's ID and
// delivery count.
func runCrashWorker(t *testing.T, e *env) (string, int32) {
	t.Helper()
	lines, kill := startCrashWorker(t, e, 0)
	defer kill()
	select {
	case line := <-lines:
		kill()
		var id string
		var count int32
		if _, err := fmt.Sscanf(line, "COMMITTED %s %d", &id, &count); err != nil {
			t.Fatalf("crash worker said %q", strings.TrimSpace(line))
		}
		return id, count
	case <-time.After(60 * time.Second):
		t.Fatal("crash worker committed no job within 60s")
	}
	return "", 0
}

// startCrashWorker runs a crash worker on e's topic and group (in batch
// mode with batches of batch jobs, when batch > 0) and returns the lines
// it prints, closed once it exited, and the func that kills it with
// SIGKILL and waits for it; the test's end calls that too.
func startCrashWorker(t *testing.T, e *env, batch int) (lines <-chan string, kill func()) {
	t.Helper()
	cfg, err := json.Marshal(crashConfig{Seeds: e.c.Seeds, Group: e.group, Topic: e.topic, DBURL: e.db.url, Schema: e.db.schema,
		Batch: batch, Verbose: testing.Verbose()})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashWorkerEnv+"="+string(cfg))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	stop, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-stop:
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			close(stop)
			<-read // the pipe is read to its end before Wait closes it
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	return ch, kill
}
