package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
)

// With -database the claims live in Postgres (idempotency/pgstore) and the
// handler records each thumbnail as a row written in the claim's
// transaction: the rows and the claim commit together, so a job that runs
// twice (a lock ran out, a worker died before its ACCEPT arrived) leaves
// its rows once, and a job whose commit failed leaves none and runs again.

// thumbnailsTable is the example's own table. A real application creates
// its tables with its migration tool; CREATE TABLE IF NOT EXISTS keeps the
// example self-contained.
const thumbnailsTable = `CREATE TABLE IF NOT EXISTS thumbnails (
	job_id     text        NOT NULL,
	image_id   text        NOT NULL,
	size       integer     NOT NULL,
	width      integer     NOT NULL,
	height     integer     NOT NULL,
	format     text        NOT NULL,
	bytes      integer     NOT NULL,
	path       text        NOT NULL, -- '' when the thumbnail was kept in memory
	created_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (job_id, size)
)`

// openDatabase connects to url, applies shareq's migrations (the claim
// table) and creates the example's table, and returns the pool and the
// claim store.
func openDatabase(ctx context.Context, url string, concurrency int) (*pgxpool.Pool, *pgstore.Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("-database: %w", err)
	}
	// Every running job holds a connection for its claim's transaction;
	// two more serve the example's own queries. With pgx's default pool
	// (4 connections, or one per CPU) the store would run at most 3 claims
	// at once and the other jobs would wait for connections. Set here, not
	// with a pool_max_conns URL parameter, so the URL stays one psql takes.
	cfg.MaxConns = int32(concurrency) + 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("-database: %w", err)
	}
	if err := setupSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	store, err := pgstore.New(pool)
	if err == nil {
		// Fail now, not on the first job, if the claim table is unusable.
		err = store.Check(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, store, nil
}

func setupSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("cannot reach Postgres (-database): %w", err)
	}
	// shareq's own tables. Up is idempotent and serialises concurrent
	// callers, so every worker replica may call it at start-up.
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	// Replicas starting together would race on CREATE TABLE IF NOT
	// EXISTS (it can fail with a unique violation); an advisory lock held
	// for the transaction makes them take turns.
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('shareq-example-thumbnails'))"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, thumbnailsTable); err != nil {
		return fmt.Errorf("create table thumbnails: %w", err)
	}
	return tx.Commit(ctx)
}

// pgSink writes the thumbnails as files (or keeps them in memory), as
// memorySink does, and records each as a row in the claim's transaction.
type pgSink struct {
	files *memorySink
}

var _ Sink = (*pgSink)(nil)

func (s *pgSink) Save(ctx context.Context, job *handler.Job, imageID string, thumbs []Thumbnail) error {
	// The transaction of the claim this job runs in. The handler must
	// neither commit nor roll it back: the store does, after the handler
	// returns.
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("no claim transaction: wrap the handler in idempotency.Middleware with a pgstore.Store"))
	}
	// Files first: if writing them fails, nothing is committed and the
	// job runs again. If the commit fails after they were written, the
	// job's next run rewrites them with the same bytes.
	if s.files.dir != "" {
		if err := writeFiles(s.files.dir, imageID, thumbs); err != nil {
			return err
		}
	}
	for _, t := range thumbs {
		path := ""
		if s.files.dir != "" {
			path = thumbPath(s.files.dir, imageID, t)
		}
		if _, err := tx.Exec(ctx,
			`INSERT INTO thumbnails (job_id, image_id, size, width, height, format, bytes, path)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			job.ID(), imageID, t.Size, t.Width, t.Height, t.Format, len(t.Data), path); err != nil {
			return fmt.Errorf("insert thumbnail %d: %w", t.Size, err)
		}
	}
	// Counted before the commit: a commit that fails makes the job run
	// again, and the summary shows it as saved twice.
	s.files.record(imageID, thumbs, s.files.dir == "")
	return nil
}

// countRows returns how many thumbnail rows and distinct jobs of the run
// named run the table holds.
func countRows(ctx context.Context, pool *pgxpool.Pool, run string) (rows, jobs int, err error) {
	err = pool.QueryRow(ctx,
		`SELECT count(*), count(DISTINCT job_id) FROM thumbnails WHERE starts_with(job_id, $1)`,
		run+"/").Scan(&rows, &jobs)
	return rows, jobs, err
}
