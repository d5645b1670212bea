package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// thumbnailsDDL is the application's own table: one row per thumbnail
// made. It has no unique constraint on job_id on purpose, so a job whose
// side effect happened twice shows up as two rows instead of an error.
const thumbnailsDDL = `CREATE TABLE thumbnails (
	id       bigserial   PRIMARY KEY,
	job_id   text        NOT NULL,
	image    text        NOT NULL,
	delivery int         NOT NULL,
	made_at  timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// db is a Postgres schema of one test's own: shareq's migrations applied
// and the thumbnails table created. It is dropped when the test ends.
type db struct {
	url    string
	schema string
	// pool connects to the schema directly; tests use it to set up and
	// to check, never through a proxy.
	pool *pgxpool.Pool
}

func newDB(t testing.TB) *db {
	t.Helper()
	d := &db{url: pgtest.URL(t), schema: pgtest.Schema(t)}
	d.pool = d.connect(t, "", 4)
	if err := migrations.Up(t.Context(), d.pool); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	if _, err := d.pool.Exec(t.Context(), thumbnailsDDL); err != nil {
		t.Fatalf("create thumbnails: %v", err)
	}
	return d
}

// connect returns a pool whose connections use the test's schema, closed
// when the test ends. A non-empty addr ("host:port") replaces the
// database's address: the outage test points it at its proxy.
func (d *db) connect(t testing.TB, addr string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		t.Fatalf("parse %s: %v", pgtest.EnvURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = d.schema
	cfg.MaxConns = maxConns
	if addr != "" {
		host, port, ok := strings.Cut(addr, ":")
		if !ok {
			t.Fatalf("connect: address %q has no port", addr)
		}
		cfg.ConnConfig.Host = host
		if _, err := fmt.Sscan(port, &cfg.ConnConfig.Port); err != nil {
			t.Fatalf("connect: address %q: %v", addr, err)
		}
		cfg.ConnConfig.Fallbacks = nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// rowsPerJob returns how many thumbnails rows each job ID has.
func (d *db) rowsPerJob(t testing.TB) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := d.pool.Query(ctx, "SELECT job_id, count(*) FROM thumbnails GROUP BY job_id")
	if err != nil {
		t.Fatalf("count thumbnails: %v", err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatalf("count thumbnails: %v", err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("count thumbnails: %v", err)
	}
	return out
}

// claims returns how many claim rows the schema holds.
func (d *db) claims(t testing.TB) int {
	t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgstore.TableDefault).Scan(&n); err != nil {
		t.Fatalf("count claims: %v", err)
	}
	return n
}

// thumbnailer is the job handler of these tests. It "makes a thumbnail"
// of the image named by the job's value: it works for a while, then
// writes one row into thumbnails through the claim's transaction, so the
// row commits with the claim or not at all. It counts its runs per job.
type thumbnailer struct {
	// work is how long a job takes before its write.
	work time.Duration
	// fail, when set, is asked first; a non-nil error is the outcome
	// and nothing is written.
	fail func(job *handler.Job) error

	mu   sync.Mutex
	runs map[string][]int32 // job ID → delivery counts of the runs
}

func newThumbnailer(work time.Duration) *thumbnailer {
	return &thumbnailer{work: work, runs: map[string][]int32{}}
}

func (th *thumbnailer) Handle(ctx context.Context, job *handler.Job) error {
	th.mu.Lock()
	th.runs[job.ID()] = append(th.runs[job.ID()], job.DeliveryCount)
	th.mu.Unlock()
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("thumbnails: no claim transaction; wrap the handler in idempotency.Middleware"))
	}
	if th.fail != nil {
		if err := th.fail(job); err != nil {
			return err
		}
	}
	if th.work > 0 {
		select {
		case <-time.After(th.work):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	_, err := tx.Exec(ctx, "INSERT INTO thumbnails (job_id, image, delivery) VALUES ($1, $2, $3)",
		job.ID(), string(job.Value), job.DeliveryCount)
	return err
}

// HandleBatch is the thumbnailer as a batch function (handler.Batch
// behind idempotency.Batch): it asks fail about each job, and writes the
// rows of the others in one statement through the claim's transaction,
// without waiting.
func (th *thumbnailer) HandleBatch(ctx context.Context, jobs []*handler.Job) []error {
	errs := make([]error, len(jobs))
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return every(errs, handler.Permanent(errors.New("thumbnails: no claim transaction; wrap the batch function in idempotency.Batch")))
	}
	var ids, images []string
	var deliveries []int32
	th.mu.Lock()
	for i, job := range jobs {
		th.runs[job.ID()] = append(th.runs[job.ID()], job.DeliveryCount)
		if th.fail != nil {
			if errs[i] = th.fail(job); errs[i] != nil {
				continue
			}
		}
		ids, images, deliveries = append(ids, job.ID()), append(images, string(job.Value)), append(deliveries, job.DeliveryCount)
	}
	th.mu.Unlock()
	_, err := tx.Exec(ctx, "INSERT INTO thumbnails (job_id, image, delivery) SELECT * FROM unnest($1::text[], $2::text[], $3::int[])",
		ids, images, deliveries)
	if err != nil {
		return every(errs, err)
	}
	return errs
}

// every sets each of errs to err and returns errs.
func every(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// ran returns the delivery counts the handler ran job id with.
func (th *thumbnailer) ran(id string) []int32 {
	th.mu.Lock()
	defer th.mu.Unlock()
	return append([]int32(nil), th.runs[id]...)
}

// totalRuns returns how many times the handler ran, over all jobs.
func (th *thumbnailer) totalRuns() int {
	th.mu.Lock()
	defer th.mu.Unlock()
	n := 0
	for _, r := range th.runs {
		n += len(r)
	}
	return n
}

// env is one end-to-end test's world: a Kafka cluster (kfake, or the real
// broker), a topic and a share group of its own, a Postgres schema of its
// own, and a recorder of the worker's events.
type env struct {
	c     *kafkatest.Cluster
	topic string
	group string
	db    *db
	obs   *shareqtest.Observer
}

func setup(t *testing.T, partitions int32, opts ...kafkatest.Option) *env {
	t.Helper()
	d := newDB(t) // first: skips before any broker work when there is no database
	c := kafkatest.New(t, opts...)
	return &env{c: c, topic: c.Topic(t, partitions), group: c.Group(t), db: d, obs: new(shareqtest.Observer)}
}

// jobID returns the shareq-job-id of job i of a test.
func jobID(i int) string { return fmt.Sprintf("job-%03d", i) }

// record returns a job record for the test's topic with a job-id header;
// its key is the ID (so copies of one job share a partition) and its value
// the image it is about.
func (e *env) record(id string) *kgo.Record {
	return &kgo.Record{
		Topic:   e.topic,
		Key:     []byte(id),
		Value:   []byte("image-" + id),
		Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(id)}},
	}
}

// produce writes one record per ID, in order, and returns them with their
// partitions, offsets and timestamps filled in.
func (e *env) produce(t *testing.T, ids ...string) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		recs[i] = e.record(id)
	}
	e.c.Produce(t, recs...)
	return recs
}

// claimsMiddleware returns idempotency.Middleware on a pgstore Store over
// pool, checked at start, counting suppressed duplicates in dups.
func claimsMiddleware(t testing.TB, pool *pgxpool.Pool, dups *atomic.Int64, opts ...pgstore.Option) handler.Middleware {
	t.Helper()
	mw, err := newClaims(t.Context(), pool, dups, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func newClaims(ctx context.Context, pool *pgxpool.Pool, dups *atomic.Int64, opts ...pgstore.Option) (handler.Middleware, error) {
	store, err := newStore(ctx, pool, opts...)
	if err != nil {
		return nil, err
	}
	return idempotency.Middleware(store, idempotency.OnDuplicate(func(*handler.Job, string) { dups.Add(1) }))
}

// newBatchClaims returns fn wrapped in idempotency.Batch on a pgstore
// Store over pool, checked at start, counting suppressed duplicates in
// dups.
func newBatchClaims(ctx context.Context, pool *pgxpool.Pool, dups *atomic.Int64, fn handler.BatchFunc) (handler.BatchFunc, error) {
	store, err := newStore(ctx, pool)
	if err != nil {
		return nil, err
	}
	return idempotency.Batch(store, fn, idempotency.OnDuplicate(func(*handler.Job, string) { dups.Add(1) }))
}

// newStore returns a pgstore Store over pool, its table checked.
func newStore(ctx context.Context, pool *pgxpool.Pool, opts ...pgstore.Option) (*pgstore.Store, error) {
	store, err := pgstore.New(pool, opts...)
	if err != nil {
		return nil, err
	}
	return store, store.Check(ctx)
}

// start runs a worker for the test's topic and group until the returned
// stop is called (or the test ends); stop returns Run's error. opts come
// after the defaults and may override them.
func (e *env) start(t *testing.T, h handler.Handler, opts ...worker.Option) (stop func() error) {
	t.Helper()
	return e.run(t, e.newWorker(t, h, opts...))
}

// newWorker returns a worker for the test's topic and group; opts come
// after the defaults and may override them.
func (e *env) newWorker(t *testing.T, h handler.Handler, opts ...worker.Option) *worker.Worker {
	t.Helper()
	base := []worker.Option{
		worker.Brokers(e.c.Seeds...),
		worker.Group(e.group),
		worker.Handle(e.topic, h),
		worker.Observers(e.obs),
		worker.Logger(shareqtest.Logger()),
		worker.ShutdownTimeout(5 * time.Second),
	}
	w, err := worker.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	return w
}

// run runs w until the returned stop is called (or the test ends); stop
// returns Run's error.
func (e *env) run(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	stop = kafkatest.Run(t, w.Run)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
	return stop
}

// event is one JobFinished call.
type event = shareqtest.Event

// acked returns the IDs of the jobs with an ACCEPT among es.
func acked(es []event) map[string]bool {
	out := map[string]bool{}
	for _, e := range es {
		if e.Result.Ack == worker.AckAccept {
			out[e.ID] = true
		}
	}
	return out
}

// countAck counts the events with ack a.
func countAck(es []event, a worker.Ack) int {
	n := 0
	for _, e := range es {
		if e.Result.Ack == a {
			n++
		}
	}
	return n
}
