// Package outboxbench holds the producer side's comparisons with River
// (its _test.go files, Go benchmarks) and the transaction they share
// with shareq-bench's producer scenario.
package outboxbench

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Signup is the job of the producer-side benchmarks: a welcome for a
// user who just signed up.
type Signup struct {
	User string `json:"user"`
	N    int    `json:"n"`
}

// Kind is Signup's River job kind.
func (Signup) Kind() string { return "shareq_bench_welcome" }

// UsersTable is the business table of the benchmarks' transactions.
const UsersTable = "bench_users"

// CreateUsersTable creates UsersTable in the pool's search path.
func CreateUsersTable(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "CREATE TABLE "+UsersTable+" (id bigserial PRIMARY KEY, email text NOT NULL)")
	return err
}

// SignupTx is one transaction of the benchmarks: the business row, then
// the job through enqueueJob (nil: the business row alone).
func SignupTx(ctx context.Context, pool *pgxpool.Pool, n int, enqueueJob func(tx pgx.Tx, v Signup) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+UsersTable+" (email) VALUES ($1)", "user@example.com"); err != nil {
			return err
		}
		if enqueueJob == nil {
			return nil
		}
		return enqueueJob(tx, Signup{User: "user@example.com", N: n})
	})
}
