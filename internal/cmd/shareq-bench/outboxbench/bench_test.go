package outboxbench

// The transactional enqueue of package enqueue/pgoutbox against River's,
// on the test Postgres:
//
//	SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url) \
//	  go test -run '^$' -bench . -benchtime 3000x ./internal/cmd/shareq-bench/outboxbench/
//
// BenchmarkTransactionalEnqueue: a business row and a job in one
// transaction, shareq's EnqueueTx against River's InsertTx (an insert-only
// River client, same Postgres, same pool), one transaction at a time and
// benchParallelism at once, interleaved (internal/benchcmp); it reports
// both rates and shareq/river. The other producer-side benchmarks are in
// enqueue/pgoutbox.

import (
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/benchcmp"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// benchParallelism is how many transactions run at once in the parallel
// variant.
const benchParallelism = 4

// benchDB returns a pool on a migrated schema with a business table,
// UsersTable.
func benchDB(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool, _ := pgtest.NewPool(b, 32)
	if err := migrations.Up(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	if err := CreateUsersTable(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	return pool
}

// riverClient returns an insert-only River client on pool (no queues, no
// workers: River's InsertTx and nothing else runs) and its schema, a new
// one migrated by River's own migrator, so that both sides of a
// comparison share one Postgres and one pool.
func riverClient(b *testing.B, pool *pgxpool.Pool) (*river.Client[pgx.Tx], string) {
	b.Helper()
	schema := pgtest.Schema(b)
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(b.Context(), rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	rc, err := river.NewClient(driver, &river.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	return rc, schema
}

func BenchmarkTransactionalEnqueue(b *testing.B) {
	pool := benchDB(b)
	topic := "welcome" // no relay runs: the topic need not exist

	rc, riverSchema := riverClient(b, pool)
	ctx := b.Context()
	var n, shareqN, riverN atomic.Int64
	shareq := func() error {
		shareqN.Add(1)
		return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
			_, err := pgoutbox.EnqueueTx(ctx, tx, topic, v)
			return err
		})
	}
	riv := func() error {
		riverN.Add(1)
		return SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v Signup) error {
			_, err := rc.InsertTx(ctx, tx, v, nil)
			return err
		})
	}
	for _, par := range []int{1, benchParallelism} {
		b.Run(benchcmp.ParName(par), func(b *testing.B) { benchcmp.Interleave(b, par, "river", riv, "shareq", shareq) })
	}
	// Both sides committed what they were timed for.
	var outbox, jobs, users int64
	err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgoutbox.Table+"), (SELECT count(*) FROM "+
		pgx.Identifier{riverSchema, "river_job"}.Sanitize()+"), (SELECT count(*) FROM "+UsersTable+")").Scan(&outbox, &jobs, &users)
	if err != nil {
		b.Fatal(err)
	}
	if outbox != shareqN.Load() || jobs != riverN.Load() || users != outbox+jobs {
		b.Fatalf("outbox rows %d, River jobs %d, users %d; want %d, %d and their sum", outbox, jobs, users, shareqN.Load(), riverN.Load())
	}
}
