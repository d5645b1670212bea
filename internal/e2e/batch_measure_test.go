package e2e_test

// The batch handler's measurement (issue 33): rows inserted through a
// batch handler of 100 (handler.Batch behind idempotency.Batch on
// pgstore, one INSERT and one claim transaction per batch) against the
// same rows inserted one job at a time (idempotency.Middleware on
// pgstore, a claim transaction per job), on the same broker and Postgres,
// in the same run, with pools of the same size. It loads the machine for
// a few minutes, so only on request:
//
//	SHAREQ_BATCH_MEASURE=1 SHAREQ_TEST_BROKERS=127.0.0.1:19092 \
//	SHAREQ_TEST_DATABASE_URL=... go test -run TestMeasureBatchInserts -v -timeout 30m ./internal/e2e
//
// SHAREQ_BATCH_JOBS sets the jobs of each run (default 100,000). The
// figures are in BENCHMARKS.md, "Batch handlers".

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// The measurement's settings: the pool both runs claim through, and each
// run's concurrency. One job at a time gets a connection per job it runs
// (its best with this pool); batches of 100 get four batches at once
// (eight gained nothing more: at four the worker itself is the limit on
// a Postgres that commits without a disk).
const (
	measurePool        = 33
	measureJobsAtOnce  = measurePool - 1
	measureBatch       = 100
	measureBatchesOnce = 4
)

// TestMeasureBatchInserts measures both ways of inserting the rows and
// logs their rates, their ratio (issue 33's goal: at least 5) and the
// Postgres settings a commit's cost depends on. A measurement, not a
// check: it fails only when a job is lost or runs twice.
func TestMeasureBatchInserts(t *testing.T) {
	if os.Getenv("SHAREQ_BATCH_MEASURE") == "" {
		t.Skip("a measurement: set SHAREQ_BATCH_MEASURE=1 (see batch_measure_test.go)")
	}
	n := 100_000
	if s := os.Getenv("SHAREQ_BATCH_JOBS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("SHAREQ_BATCH_JOBS=%q: want a positive number", s)
		}
	}
	e := setup(t, 6)
	pool := e.db.connect(t, "", measurePool)
	var dups atomic.Int64

	perJob := e.measure(t, n, "one job at a time", newThumbnailer(0), func(th *thumbnailer) (handler.Handler, []worker.Option) {
		return th, []worker.Option{worker.Use(claimsMiddleware(t, pool, &dups)), worker.Concurrency(measureJobsAtOnce)}
	})
	batched := e.measure(t, n, fmt.Sprintf("batches of %d", measureBatch), newThumbnailer(0), func(th *thumbnailer) (handler.Handler, []worker.Option) {
		fn, err := newBatchClaims(t.Context(), pool, &dups, th.HandleBatch)
		if err != nil {
			t.Fatal(err)
		}
		return handler.Batch(measureBatch, 50*time.Millisecond, fn), []worker.Option{worker.Concurrency(measureBatch * measureBatchesOnce)}
	})
	ratio := batched / perJob
	verdict := "met"
	if ratio < 5 {
		verdict = "not met"
	}
	t.Logf("%s, %d jobs each, pool of %d, Postgres with %s: one job at a time %.0f jobs/s (concurrency %d); batches of %d %.0f jobs/s (concurrency %d); ratio %.1fx (goal at least 5x: %s)",
		e.c.Kind, n, measurePool, durability(t, pool), perJob, measureJobsAtOnce, measureBatch, batched, measureBatch*measureBatchesOnce, ratio, verdict)
}

// durability names the settings that decide what a commit costs: with
// fsync or synchronous_commit off (scripts/postgres.sh's test cluster) a
// commit waits for no disk, which favours one transaction per job.
func durability(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var fsync, sync string
	if err := pool.QueryRow(t.Context(), "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &sync); err != nil {
		t.Fatalf("read Postgres's durability settings: %v", err)
	}
	return "fsync=" + fsync + " synchronous_commit=" + sync
}

// measure produces n jobs to a topic and group of their own, runs a
// worker with the handler and options newHandler returns until every job
// is accepted, checks that each wrote its row once, and returns the jobs
// per second from the first job's start to the last one's end.
func (e *env) measure(t *testing.T, n int, what string, th *thumbnailer, newHandler func(*thumbnailer) (handler.Handler, []worker.Option)) float64 {
	t.Helper()
	topic, group := e.c.Topic(t, 6), e.c.Group(t)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("%s-%06d", topic, i)
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte("image-" + id),
			Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(id)}}}
	}
	e.c.ProduceBatch(t, recs...)

	h, opts := newHandler(th)
	clock := newRunClock(n)
	base := []worker.Option{
		worker.Brokers(e.c.Seeds...), worker.Group(group), worker.Handle(topic, h),
		worker.Observers(clock), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5 * time.Second),
	}
	w, err := worker.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	stop := e.run(t, w)
	select {
	case <-clock.done:
	case <-time.After(20 * time.Minute):
		t.Fatalf("%s: %d of %d jobs accepted after 20 minutes", what, clock.accepted.Load(), n)
	}
	if err := stop(); err != nil {
		t.Fatalf("%s: worker Run: %v", what, err)
	}
	if clock.other.Load() > 0 {
		t.Errorf("%s: %d jobs ended otherwise than accepted", what, clock.other.Load())
	}
	if runs := th.totalRuns(); runs != n {
		t.Errorf("%s: the handler ran %d times for %d jobs", what, runs, n)
	}
	took := clock.took()
	rate := float64(n) / took.Seconds()
	t.Logf("%s: %d jobs in %v: %.0f jobs/s", what, n, took.Round(time.Millisecond), rate)
	return rate
}

// runClock is a worker observer that times a run: from the first job's
// start until n jobs are accepted (done closes then).
type runClock struct {
	n        int64
	accepted atomic.Int64
	other    atomic.Int64
	done     chan struct{}

	mu          sync.Mutex
	first, last time.Time
}

func newRunClock(n int) *runClock { return &runClock{n: int64(n), done: make(chan struct{})} }

func (c *runClock) JobStarted(*handler.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.IsZero() {
		c.first = time.Now()
	}
}

func (c *runClock) JobFinished(_ *handler.Job, res worker.Result) {
	if res.Ack != worker.AckAccept {
		c.other.Add(1)
		return
	}
	if c.accepted.Add(1) == c.n {
		c.mu.Lock()
		c.last = time.Now()
		c.mu.Unlock()
		close(c.done)
	}
}

func (c *runClock) LockRenewed(*handler.Job, error) {}
func (c *runClock) AckFailed(string, int32, error)  {}

// took is the time from the first job's start to the last one's end.
func (c *runClock) took() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first)
}
