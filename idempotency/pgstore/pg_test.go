package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
)

// databaseURL returns SHAREQ_TEST_DATABASE_URL. Without it the test is
// skipped, except under CI=true, where a missing database is a failure.
func databaseURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SHAREQ_TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SHAREQ_TEST_DATABASE_URL is not set; CI must start Postgres and set it (scripts/postgres.sh)")
		}
		t.Skip("SHAREQ_TEST_DATABASE_URL is not set; skipping a test that needs Postgres")
	}
	return url
}

// newPool returns a pool whose connections use a new, empty schema of
// their own, dropped when the test ends, so tests can run in parallel.
func newPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := databaseURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "shareq_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{schema}.Sanitize()

	admin := func(ctx context.Context, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect to %s: %v", "SHAREQ_TEST_DATABASE_URL", err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin(t.Context(), "CREATE SCHEMA "+ident)

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse SHAREQ_TEST_DATABASE_URL: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin(ctx, "DROP SCHEMA "+ident+" CASCADE")
	})
	return pool, schema
}

// setup returns a Store on a migrated schema of the test's own, and the
// pool under it.
func setup(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool, _ := newPool(t)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	s, err := pgstore.New(pool, opts...)
	if err != nil {
		t.Fatalf("pgstore.New: %v", err)
	}
	return s, pool
}

// count returns the result of a SELECT count(*) query.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
