package pgstore_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
)

// A thumbnail handler whose database write commits with the job's claim:
// a job delivered twice inserts one row.
func Example() {
	ctx := context.Background()
	const concurrency = 10 // worker.Concurrency(concurrency)
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	// A connection per running job's claim, and some for the handlers'
	// own queries outside the claim's transaction.
	cfg.MaxConns = concurrency + 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// At start-up: create the claim table, then check it.
	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	var claims handler.Middleware
	if err := claimsFor(ctx, pool, func(mw handler.Middleware) { claims = mw }); err != nil {
		log.Fatal(err)
	}
	h := handler.Chain(thumbnail("https://cdn.invalid/t.jpg"), claims)
	_ = h // register h with the worker: worker.Handle("images", h), worker.Concurrency(concurrency)
}

// claimsFor checks the claim table and gives set the claim middleware
// (the package documentation shows its lines).
func claimsFor(ctx context.Context, pool *pgxpool.Pool, set func(handler.Middleware)) error {
	store, err := pgstore.New(pool)
	if err != nil {
		return err
	}
	if err := store.Check(ctx); err != nil { // a missing table: apply migrations.Up
		return err
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		return err
	}
	set(claims)
	return nil
}

// thumbnail records the thumbnail at url in the claim's transaction.
func thumbnail(url string) handler.Handler {
	thumbnail := handler.Func(func(ctx context.Context, job *handler.Job) error {
		tx := pgstore.Tx(ctx)
		if tx == nil {
			return handler.Permanent(errors.New("thumbnail: no claim transaction"))
		}
		_, err := tx.Exec(ctx, "INSERT INTO thumbnails (image, url) VALUES ($1, $2)", job.Key, url)
		return err
	})
	return thumbnail
}

// A batch handler that inserts the rows of up to 100 jobs with one COPY,
// in the one transaction that claims them all (docs/idempotency.md,
// "Batches: one claim transaction").
func Example_batch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := batchFor(pool, func(h handler.Handler) { _ = h }); err != nil {
		log.Fatal(err)
	}
}

// batchFor gives set the batch handler (the guide shows its lines).
func batchFor(pool *pgxpool.Pool, set func(handler.Handler)) error {
	store, err := pgstore.New(pool)
	if err != nil {
		return err
	}
	insert, err := idempotency.Batch(store, func(ctx context.Context, jobs []*handler.Job) []error {
		tx := pgstore.Tx(ctx) // one transaction: every job's claim and the rows
		rows := make([][]any, len(jobs))
		for i, j := range jobs {
			rows[i] = []any{j.ID(), j.Value}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, []string{"job_id", "body"}, pgx.CopyFromRows(rows))
		errs := make([]error, len(jobs))
		for i := range errs {
			errs[i] = err // one statement: it fails every job or none
		}
		return errs
	})
	if err != nil {
		return err
	}
	h := handler.Batch(100, 50*time.Millisecond, insert) // worker.Handle("events", h), worker.Concurrency(200)
	set(h)
	return nil
}
