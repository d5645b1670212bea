package migrations_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/migrations"
)

// Apply shareq's tables (claims, the outbox, jobs for later, the
// scheduler) at start-up, before anything uses them. Up is idempotent and
// takes an advisory lock, so every process of an app can call it.
func ExampleUp() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
}
