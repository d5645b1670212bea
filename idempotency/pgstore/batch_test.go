package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
)

// sendBatch is a batch function that writes each job's row into sends
// through the claim's transaction, each in a savepoint of its own, and
// fails (rolling back its savepoint) the jobs fail names.
func sendBatch(fail map[string]error) handler.BatchFunc {
	return func(ctx context.Context, jobs []*handler.Job) []error {
		tx := pgstore.Tx(ctx)
		errs := make([]error, len(jobs))
		for i, job := range jobs {
			sp, err := tx.Begin(ctx) // a savepoint
			if err != nil {
				return everyJob(len(jobs), err)
			}
			if _, err := sp.Exec(ctx, "INSERT INTO sends (job, attempt) VALUES ($1, $2)", job.ID(), job.DeliveryCount); err != nil {
				return everyJob(len(jobs), err)
			}
			if errs[i] = fail[job.ID()]; errs[i] != nil {
				err = sp.Rollback(ctx)
			} else {
				err = sp.Commit(ctx) // RELEASE SAVEPOINT
			}
			if err != nil {
				return everyJob(len(jobs), err)
			}
		}
		return errs
	}
}

func everyJob(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func batchOf(ids ...string) []*handler.Job {
	jobs := make([]*handler.Job, len(ids))
	for i, id := range ids {
		jobs[i] = testJob(id)
	}
	return jobs
}

func mustBatch(t *testing.T, s idempotency.BatchStore, fn handler.BatchFunc, opts ...idempotency.Option) handler.BatchFunc {
	t.Helper()
	b, err := idempotency.Batch(s, fn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A batch's writes commit with its jobs' claims; a failed job's claim
// and savepoint are undone, so its next delivery runs it (alone, the
// others found claimed) and every job's row is there once.
func TestBatchWritesOnce(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	dups := 0
	deadlock := errors.New("upstream said try again")
	fail := map[string]error{"b": deadlock}
	fn := mustBatch(t, s, sendBatch(fail), idempotency.OnDuplicate(func(*handler.Job, string) { dups++ }))

	errs := fn(t.Context(), batchOf("a", "b", "c"))
	if errs[0] != nil || errs[1] != deadlock || errs[2] != nil {
		t.Fatalf("outcomes %v, want nil, the failure, nil", errs)
	}
	if got := count(t, pool, "SELECT count(*) FROM sends WHERE job = 'b'") + count(t, pool, "SELECT count(*) FROM shareq_processed_jobs WHERE key LIKE '%/b'"); got != 0 {
		t.Fatalf("the failed job left %d rows (its write or its claim), want 0", got)
	}
	delete(fail, "b")
	for _, err := range fn(t.Context(), batchOf("a", "b", "c")) {
		if err != nil {
			t.Fatalf("second delivery of the batch: %v", err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		if n := count(t, pool, "SELECT count(*) FROM sends WHERE job = $1", id); n != 1 {
			t.Errorf("job %s wrote %d rows, want 1", id, n)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs"); n != 3 {
		t.Errorf("%d claim rows, want 3", n)
	}
	if dups != 2 {
		t.Errorf("OnDuplicate told %d times, want 2 (a and c delivered again)", dups)
	}
}

// A key that holds a cancel: its job is not run and is cancelled; the
// batch's other jobs run.
func TestBatchCancelledKey(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	key := idempotency.Key("mailers", "emails", "stopped")
	if _, err := pool.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key, cancelled_at) VALUES ($1, now())", key); err != nil {
		t.Fatal(err)
	}
	errs := mustBatch(t, s, sendBatch(nil))(t.Context(), batchOf("stopped", "go"))
	if !handler.IsCancelled(errs[0]) || !errors.Is(errs[0], idempotency.ErrCancelled) || errs[1] != nil {
		t.Fatalf("outcomes %v, want a CancelledError and nil", errs)
	}
	if n := count(t, pool, "SELECT count(*) FROM sends WHERE job = 'stopped'"); n != 0 {
		t.Errorf("the cancelled job wrote %d rows, want 0", n)
	}
}

// A commit that fails fails every job of the batch (they retry), and
// leaves neither a claim nor a write; once the cause is gone the batch
// runs once.
func TestBatchCommitFails(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	if _, err := pool.Exec(t.Context(), `
		CREATE TABLE users (id int PRIMARY KEY);
		CREATE TABLE mails (user_id int NOT NULL REFERENCES users DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	fn := mustBatch(t, s, func(ctx context.Context, jobs []*handler.Job) []error {
		_, err := pgstore.Tx(ctx).Exec(ctx, "INSERT INTO mails (user_id) SELECT 1 FROM generate_series(1, $1)", len(jobs))
		return everyJob(len(jobs), err)
	})
	for i, err := range fn(t.Context(), batchOf("m1", "m2")) {
		t.Run(fmt.Sprint("job ", i), func(t *testing.T) { wantRetry(t, err) })
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs") + count(t, pool, "SELECT count(*) FROM mails"); n != 0 {
		t.Fatalf("%d rows after a failed commit, want 0", n)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO users VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, err := range fn(t.Context(), batchOf("m1", "m2")) {
			if err != nil {
				t.Fatalf("after the fix: %v", err)
			}
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM mails"); n != 2 {
		t.Fatalf("%d rows written, want 2", n)
	}
}

// The batch's connection dies before its commit: every job fails as
// unavailable (the worker pauses), and nothing was claimed or written.
func TestBatchBackendTerminated(t *testing.T) {
	t.Parallel()
	s, pool := setup(t)
	sideEffects(t, pool)
	fn := mustBatch(t, s, func(ctx context.Context, jobs []*handler.Job) []error {
		if errs := sendBatch(nil)(ctx, jobs); errs[0] != nil {
			return errs
		}
		var pid uint32
		if err := pgstore.Tx(ctx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return everyJob(len(jobs), err)
		}
		if err := terminate(ctx, t, pool, pid); err != nil {
			return everyJob(len(jobs), err)
		}
		return make([]error, len(jobs)) // the jobs succeeded; the commit will not
	})
	for _, err := range fn(t.Context(), batchOf("a", "b")) {
		wantUnavailable(t, "a batch's commit after pg_terminate_backend", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM shareq_processed_jobs") + count(t, pool, "SELECT count(*) FROM sends"); n != 0 {
		t.Fatalf("%d rows after a failed commit, want 0", n)
	}
}
