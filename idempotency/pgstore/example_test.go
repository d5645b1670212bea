package pgstore_test

import (
	"context"
	"errors"
	"log"
	"os"

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
