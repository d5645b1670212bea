package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// The trial of issue 29 on a worker: ten handler slots, claims on a pool
// of pgx's default size on two cores (4 connections), and an e-mail
// handler that uses that pool besides the claim's transaction (reads a
// template, reserves a send slot). The worker used to take a full pool for
// a Postgres outage: the claims held every connection while their handlers
// waited for one more, the claims waiting for a connection came back
// unavailable after StatementTimeout, and the worker paused and did no job
// for over a minute with Postgres healthy. Now it warns at start that the
// pool is smaller than its concurrency, and every job is done on its first
// delivery without a pause.
func TestSmallPoolDoesNotPauseTheWorker(t *testing.T) {
	t.Parallel()
	const jobs, concurrency = 40, 10
	e := setup(t, 2)
	pool := e.db.connect(t, "", 4)
	if _, err := pool.Exec(t.Context(), "CREATE TABLE send_slots (job_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var dups atomic.Int64
	claims := claimsMiddleware(t, pool, &dups, pgstore.StatementTimeout(2*time.Second))
	email := handler.Func(func(ctx context.Context, job *handler.Job) error {
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return handler.Permanent(errors.New("no claim transaction"))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO thumbnails (job_id, image, delivery) VALUES ($1, $2, $3)",
			job.ID(), string(job.Value), job.DeliveryCount); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // renders the message while its claim holds a connection
		var template int
		if err := pool.QueryRow(ctx, "SELECT 1").Scan(&template); err != nil {
			return fmt.Errorf("read the template: %w", err)
		}
		_, err := pool.Exec(ctx, "INSERT INTO send_slots (job_id) VALUES ($1)", job.ID())
		return err
	})
	var logs logbuf.Buffer
	start := time.Now()
	e.start(t, email, worker.Use(claims), worker.Concurrency(concurrency),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
	e.produce(t, ids(jobs)...)
	es := e.obs.WaitFor(t, 60*time.Second, "every job done", func(es []event) bool { return len(acked(es)) == jobs })
	took := time.Since(start)

	for _, ev := range es {
		if ev.Result.Ack != worker.AckAccept || ev.Count != 1 {
			t.Errorf("job %s: %v on delivery %d, want accepted on its first: %s", ev.ID, ev.Result.Ack, ev.Count, shareqtest.Summary(es))
		}
	}
	if rows := e.db.rowsPerJob(t); len(rows) != jobs {
		t.Errorf("%d jobs wrote through their claims, want %d", len(rows), jobs)
	}
	var warns int
	for line := range strings.Lines(logs.String()) {
		switch {
		case strings.Contains(line, "dependency down"):
			t.Errorf("the worker paused: %s", line)
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "smaller than the worker's concurrency"):
			warns++
			if !strings.Contains(line, "pool has 4 connections for a worker that runs 10 jobs at once") || !strings.Contains(line, "cfg.MaxConns") {
				t.Errorf("the start-up warning does not name the pool, the concurrency and the fix: %s", line)
			}
		}
	}
	if warns != 1 {
		t.Errorf("%d start-up warnings about the pool, want 1; logs:\n%s", warns, logs.String())
	}
	t.Logf("%s: %d jobs, Concurrency(%d), a pool of 4 connections: all accepted on delivery 1 in %v, no pause", e.c.Kind, jobs, concurrency, took.Round(time.Millisecond))
}
