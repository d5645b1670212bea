package migrations_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/migrations/pgtest"
)

// newPool returns a pool on a schema of its own (migrations/pgtest).
func newPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	return pgtest.NewPool(t, 16)
}
