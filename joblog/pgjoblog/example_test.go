package pgjoblog_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/worker"
)

// run is a worker of images whose runs land in the job log.
func run(ctx context.Context, pool *pgxpool.Pool, brokers []string, thumbnail handler.Handler) error {
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	jl, err := pgjoblog.New(pool) // options: Retention, Buffer, FlushEvery, BatchRows, Logger
	if err != nil {
		return err
	}
	go jl.Run(ctx) // returns when ctx ends, after writing what is left (at most 10 s)
	w, err := worker.New(
		worker.Brokers(brokers...),
		worker.Group("images"),
		worker.Handle("images", thumbnail),
		worker.Observers(jl),
	)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// A worker with the job log: every run of its jobs in shareq_job_runs.
func Example() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app")
	if err != nil {
		panic(err)
	}
	thumbnail := handler.Func(func(ctx context.Context, job *handler.Job) error { return nil })
	_ = run(context.Background(), pool, []string{"localhost:9092"}, thumbnail)
}
