package pgtest_test

import (
	"testing"

	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// testSignup is what an app writes as a test of a handler that uses
// Postgres (TestSignup in its package): a pool on a schema of its own,
// with shareq's tables, so such tests run in parallel on one database.
// Without SHAREQ_TEST_DATABASE_URL the test is skipped (it fails under
// CI=true).
func testSignup(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4) // closed, and its schema dropped, when t ends
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	// … create the app's tables in the same schema, run the handler
	// against pool, check its rows.
}

// NewPool gives a test a pool on a new, empty schema of the test
// database.
func ExampleNewPool() {
	_ = testSignup
}
