package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// newPool returns a pool on a schema of its own (migrations/pgtest).
func newPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	return pgtest.NewPool(t, 16)
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
