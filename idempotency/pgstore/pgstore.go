// Package pgstore is the Postgres [idempotency.Store], on pgx/v5. Each
// claim is a row in a claim table (shareq_processed_jobs, created by the
// migrations package), inserted in the transaction that the handler writes
// its side effects through, so the claim and the side effects commit
// together.
//
// Wire it up once, and check the table at start-up:
//
//	store, err := pgstore.New(pool)
//	if err != nil {
//		return err
//	}
//	if err := store.Check(ctx); err != nil { // a missing table: apply migrations.Up
//		return err
//	}
//	claims, err := idempotency.Middleware(store)
//	if err != nil {
//		return err
//	}
//
// and write side effects through the claim's transaction:
//
//	thumbnail := handler.Func(func(ctx context.Context, job *handler.Job) error {
//		tx := pgstore.Tx(ctx)
//		if tx == nil {
//			return handler.Permanent(errors.New("thumbnail: no claim transaction"))
//		}
//		_, err := tx.Exec(ctx, "INSERT INTO thumbnails (image, url) VALUES ($1, $2)", job.Key, url)
//		return err
//	})
//
// A batch handler's jobs are claimed together with [Store.ClaimBatch]
// (through idempotency.Batch): one transaction, one connection, one
// INSERT for every key of the batch.
//
// A key can also hold a cancel: pgoutbox.CancelTx with pgoutbox.ClaimKey
// inserts a produced job's key with cancelled_at set (migration 0004), and
// [Store.Claim] then neither claims the key nor runs the handler, and
// returns [idempotency.ErrCancelled]: idempotency.Middleware ACCEPTs the
// job and the worker reports it as cancelled. The primary key orders a
// cancel and a run's claim of one key: the later insert waits for the
// earlier transaction, so a job either runs or is cancelled, never both.
//
// # The connection pool
//
// A claim holds a connection of the pool, in its transaction, for as long
// as its handler runs. A handler that also uses the pool itself (reads a
// template, reserves a send slot outside the claim's transaction) needs a
// second connection meanwhile. Size the pool for the worker's concurrency
// plus the connections the handlers and the rest of the application use at
// once, with pgxpool.ParseConfig, so that the URL stays one psql and
// migration tools accept (they refuse pgx's pool_max_conns parameter):
//
//	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
//	if err != nil {
//		log.Fatal(err)
//	}
//	// A connection per running job's claim, and some for the handlers'
//	// own queries outside the claim's transaction.
//	cfg.MaxConns = concurrency + 4
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//
// pgx's default pool has 4 connections (or one per CPU). When the pool is
// smaller than the worker's concurrency, the store keeps the worker going:
// with a *pgxpool.Pool as its [DB], its claims never hold more than
// MaxConns-1 connections at once, so one is always left for the
// handlers' own queries and for the store's probe (see
// [StatementTimeout]). The other claims wait for a turn under their job's
// context (the worker renews their locks meanwhile). The worker warns at
// start ([Store.CheckConcurrency]), and a claim that waits longer than
// StatementTimeout for a connection starts an episode of starvation: one
// Warn line, to the logger of the job's context, names the pool's size,
// the connections in use and held by claims, the claims waiting and the
// fix, and one Info line says when claims get connections again. Neither
// is an outage: the worker does not pause for a full pool.
//
// Without that bound, claims took every connection while their handlers
// waited for one more, and the claims still waiting for a connection were
// taken for a Postgres outage: the worker paused with Postgres healthy and
// ran no job until the handlers' contexts ended. Two other ways out were
// weighed: lending the claim's connection to the handler cannot reach the
// queries a handler makes on the pool itself, which is the code users
// write; and a pool of the store's own would double the application's
// connections and still leave the handlers' pool to size. A claim bound
// costs throughput only while the pool is too small, and says so.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shareq/shareq/idempotency"
)

var (
	_ idempotency.Store      = (*Store)(nil)
	_ idempotency.BatchStore = (*Store)(nil)
	_ idempotency.Sweeper    = (*Store)(nil)
)

// Defaults for the options of [New].
const (
	// TableDefault is the claim table, as created by migrations.Up.
	TableDefault = "shareq_processed_jobs"
	// SweepBatchDefault is how many rows one DELETE of [Store.Sweep]
	// removes at most.
	SweepBatchDefault = 1000
)

// rollbackTimeout bounds the rollback of a claim whose context is already
// done, so the connection goes back to the pool clean instead of being
// closed.
const rollbackTimeout = 5 * time.Second

// ErrNoTable is matched (errors.Is) by the error of [Store.Check],
// [Store.Claim], [Store.ClaimTx] and [Store.Sweep] when the claim table does
// not exist. Its message says to apply the migrations.
var ErrNoTable = errors.New("pgstore: claim table does not exist")

// DB is what a [Store] needs from Postgres: a *pgxpool.Pool fits (a Store
// then takes its claims' connections with the pool's Acquire, and reads
// its Stat, so that its claims leave the pool a connection: see the
// package documentation), and so does a *pgx.Conn for a store used from
// one goroutine at a time. A pgx.Tx fits too, but then every claim is a
// savepoint that lasts only if that transaction commits; use
// [Store.ClaimTx] for that instead.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// An Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	table      string
	sweepBatch int
	timeout    time.Duration
}

// Table sets the claim table: a lower-case Postgres identifier, optionally
// qualified by a schema ("jobs.processed"). The table needs the columns
// key (text, primary key or unique), claimed_at (timestamptz, default
// now()) and cancelled_at (timestamptz, nullable), as in the migrations
// package. Default [TableDefault], found through the connection's
// search_path. pgoutbox.CancelTx writes its cancels into TableDefault
// only: a worker on another table never sees them.
func Table(name string) Option {
	return optionFunc(func(c *config) { c.table = name })
}

// SweepBatch sets how many rows one DELETE of [Store.Sweep] removes at
// most; Sweep repeats it until no old row is left, so locks stay short on
// a large table. Default [SweepBatchDefault].
func SweepBatch(n int) Option {
	return optionFunc(func(c *config) { c.sweepBatch = n })
}

// Store is the Postgres [idempotency.Store]. It is safe for concurrent use
// when its [DB] is (a pool is).
type Store struct {
	db       DB
	table    string // as given, for messages
	claimSQL string
	// cancelledSQL tells a key claimed by a cancel from one claimed by
	// a run, once the claim's insert found the key taken.
	cancelledSQL string
	// The batch's statements (ClaimBatch): claim keys, tell the taken
	// ones apart, undo the claims of failed jobs.
	claimBatchSQL string
	takenSQL      string
	unclaimSQL    string
	sweepSQL      string
	checkSQL      string
	batch         int
	timeout       time.Duration // StatementTimeout
	// pool is db when it is a pool (a *pgxpool.Pool), and claims its
	// claim slots; both nil otherwise.
	pool   pool
	claims *claimSlots
}

var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// New returns a Store that keeps claims in db. It checks its options, not
// the database: call [Store.Check] at start-up for that.
func New(db DB, opts ...Option) (*Store, error) {
	c := &config{table: TableDefault, sweepBatch: SweepBatchDefault, timeout: StatementTimeoutDefault}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	var errs []error
	if db == nil {
		errs = append(errs, errors.New("pgstore: nil DB"))
	}
	parts := strings.Split(c.table, ".")
	if len(parts) > 2 {
		parts = nil
	}
	for _, p := range parts {
		if !identRE.MatchString(p) {
			parts = nil
			break
		}
	}
	if parts == nil {
		errs = append(errs, fmt.Errorf("pgstore: Table(%q): want a lower-case identifier of at most 63 bytes, optionally schema-qualified (schema.table)", c.table))
	}
	if c.sweepBatch < 1 {
		errs = append(errs, fmt.Errorf("pgstore: SweepBatch(%d): must be at least 1", c.sweepBatch))
	}
	if c.timeout < 0 {
		errs = append(errs, fmt.Errorf("pgstore: StatementTimeout(%v): must not be negative", c.timeout))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	t := pgx.Identifier(parts).Sanitize()
	s := &Store{
		db:           db,
		table:        c.table,
		claimSQL:     "INSERT INTO " + t + " (key) VALUES ($1) ON CONFLICT (key) DO NOTHING",
		cancelledSQL: "SELECT cancelled_at IS NOT NULL FROM " + t + " WHERE key = $1",
		// Sorted, so that two batches that share keys take their rows in
		// one order and never wait for each other both.
		claimBatchSQL: "INSERT INTO " + t + " (key) SELECT k FROM unnest($1::text[]) AS k ORDER BY k ON CONFLICT (key) DO NOTHING RETURNING key",
		takenSQL:      "SELECT key FROM " + t + " WHERE key = ANY($1::text[]) AND cancelled_at IS NOT NULL",
		unclaimSQL:    "DELETE FROM " + t + " WHERE key = ANY($1::text[])",
		sweepSQL: "DELETE FROM " + t + " WHERE key IN (SELECT key FROM " + t +
			" WHERE claimed_at < $1 ORDER BY claimed_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
		checkSQL: "SELECT key, claimed_at, cancelled_at FROM " + t + " LIMIT 0",
		batch:    c.sweepBatch,
		timeout:  c.timeout,
	}
	if p, ok := db.(pool); ok {
		s.pool, s.claims = p, newClaimSlots(p)
	}
	return s, nil
}

// Tx returns the transaction of the claim that ctx runs in, or nil when
// ctx carries none (the handler is not wrapped in idempotency.Middleware
// with a pgstore Store). A handler writes its side effects through it, so
// that they commit with the claim:
//
//	tx := pgstore.Tx(ctx)
//	if tx == nil {
//		return handler.Permanent(errors.New("thumbnails: no claim transaction; wrap the handler in idempotency.Middleware"))
//	}
//	_, err := tx.Exec(ctx, "INSERT INTO thumbnails (image_id, url) VALUES ($1, $2)", id, url)
//
// The handler must neither commit nor roll back the transaction: the store
// does, after the handler returns. An error from a statement in it aborts
// the transaction; return it (a handler that swallows it makes the commit
// fail, and the job is retried).
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := idempotency.Tx(ctx).(pgx.Tx)
	return tx
}

// Claim claims key in a new transaction and runs fn with the transaction
// in its context (see [Tx]), as described on [idempotency.Store]: it
// begins, inserts key with ON CONFLICT DO NOTHING, and rolls back without
// calling fn when key was there (returning [idempotency.ErrCancelled]
// when a cancel put it there: see [Store.ClaimTx]); otherwise it calls fn, rolls back and
// returns fn's error unchanged when fn fails, and commits when it
// succeeds. A claim of key in another transaction that has not finished
// makes the insert wait for it.
//
// A commit that fails returns an error, also when its outcome is unknown
// (the connection was lost during COMMIT): the claim row and fn's writes
// were then either both committed or both rolled back, and a later Claim
// of key either finds the row or runs fn again.
//
// A failure because Postgres is unreachable or failing over (to begin,
// claim or commit, or an error of fn's while the transaction's connection
// died) is a [handler.UnavailableError] with dependency [Dependency],
// which pauses the worker instead of spending the job's deliveries; the
// cause stays in its chain (errors.Is, errors.As). Set connect_timeout in
// the pool's connection string, so that a begin against an unreachable
// host fails in seconds rather than after the system's TCP timeout. A
// Postgres that stops answering (a silent network) is an outage too,
// after [StatementTimeout].
func (s *Store) Claim(ctx context.Context, key string, fn func(ctx context.Context) error) (claimed bool, err error) {
	if key == "" {
		return false, fmt.Errorf("pgstore: claim: %w", idempotency.ErrEmptyKey)
	}
	tx, release, err := s.begin(ctx, fmt.Sprintf("claim %q", key))
	if err != nil {
		return false, err
	}
	defer release() // after the rollback below
	done := false
	defer func() {
		// Rolls back on every path but a commit, including a panic in fn.
		if !done {
			rollback(ctx, tx)
		}
	}()
	ok, err := s.ClaimTx(ctx, tx, key)
	if err != nil || !ok {
		return false, err
	}
	if err := fn(idempotency.WithTx(ctx, watchedTx{Tx: tx, s: s})); err != nil {
		// A handler whose statements failed because the connection died
		// returns that failure: an outage, not the job's.
		return false, unavailable(ctx, tx, err)
	}
	done = true
	if err := s.bounded(ctx, "COMMIT", tx.Commit); err != nil {
		return false, unavailable(ctx, tx, fmt.Errorf("pgstore: claim %q: commit: %w", key, err))
	}
	return true, nil
}

// rollback rolls tx back even when ctx is done, so that a cancelled
// handler's connection returns to the pool clean. Its error is dropped:
// pgx closes a connection whose rollback failed, and the server rolls back
// the transaction of a closed connection.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// ClaimTx claims key inside tx, the caller's transaction, and reports
// whether it did: false means key is already claimed (by a committed
// transaction, or earlier in tx). A key that holds a cancel (a row with
// cancelled_at set: pgoutbox.CancelTx cancelled the job after the relay
// produced it) is not claimed either, and the error is
// [idempotency.ErrCancelled], so that the middleware ACCEPTs the job
// without running it and the worker reports it as cancelled. The claim lasts only if the caller
// commits tx, together with whatever else tx wrote; use it to claim a job
// from code that already runs in a transaction. Like [Store.Claim], it
// waits for an unfinished claim of key in another transaction. An outage
// of Postgres is a [handler.UnavailableError], as for Claim.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, key string) (bool, error) {
	if key == "" {
		return false, fmt.Errorf("pgstore: claim: %w", idempotency.ErrEmptyKey)
	}
	var tag pgconn.CommandTag
	err := s.watched(ctx, "the claim's INSERT", func(ctx context.Context) (err error) {
		tag, err = tx.Exec(ctx, s.claimSQL, key)
		return err
	})
	if err != nil {
		return false, unavailable(ctx, tx, fmt.Errorf("pgstore: claim %q: %w", key, s.explain(err)))
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	// Taken: by a run, or by a cancel. The insert waited for the
	// transaction that wrote the row to commit, so this statement (read
	// committed) sees it; a row swept since reads as a run's.
	var cancelled bool
	err = s.watched(ctx, "the claim's SELECT", func(ctx context.Context) error {
		return tx.QueryRow(ctx, s.cancelledSQL, key).Scan(&cancelled)
	})
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, unavailable(ctx, tx, fmt.Errorf("pgstore: claim %q: %w", key, s.explain(err)))
	}
	if cancelled {
		return false, fmt.Errorf("pgstore: claim %q: %w", key, idempotency.ErrCancelled)
	}
	return false, nil
}

// Sweep deletes the claims made before olderThan, at most [SweepBatch]
// rows per statement, and returns how many it deleted. It compares
// olderThan with claimed_at, which the database's clock set: a retention
// of days does not mind clock skew between hosts, but keep it in mind for
// short ones. A deleted key can be claimed again, so keep claims longer
// than a job can be delivered again (at least the topic's retention). Rows
// locked by a concurrent Sweep are skipped. When ctx is done between two
// statements, Sweep returns what it deleted so far with the error.
func (s *Store) Sweep(ctx context.Context, olderThan time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, s.sweepSQL, olderThan, s.batch)
		if err != nil {
			return total, fmt.Errorf("pgstore: sweep: %w", s.explain(err))
		}
		n := tag.RowsAffected()
		total += n
		if n < int64(s.batch) {
			return total, nil
		}
	}
}

// Check verifies, in a transaction it rolls back, that the claim table
// exists with its key, claimed_at and cancelled_at columns (a table from
// before migration 0004 lacks cancelled_at: apply migrations.Up) and that a claim can be
// inserted (key is unique, the role may insert). Call it at start-up to
// fail fast: the error for a missing table matches [ErrNoTable] and reads
// "pgstore: table shareq_processed_jobs does not exist: apply migrations
// (migrations.Up)".
func (s *Store) Check(ctx context.Context) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: check: %w", err)
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, s.checkSQL); err != nil {
		return s.checkError(err)
	}
	if _, err := tx.Exec(ctx, s.claimSQL, "shareq:pgstore-check"); err != nil {
		return s.checkError(err)
	}
	return nil
}

func (s *Store) checkError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42703": // undefined_column
			return fmt.Errorf("pgstore: table %s lacks a column: apply migrations (migrations.Up): %w", s.table, err)
		case "42P10": // invalid_column_reference: no unique index for ON CONFLICT (key)
			return fmt.Errorf("pgstore: table %s: column key is not its primary key: apply migrations (migrations.Up): %w", s.table, err)
		}
	}
	if err = s.explain(err); errors.Is(err, ErrNoTable) {
		return fmt.Errorf("pgstore: %w", err)
	}
	return fmt.Errorf("pgstore: check table %s: %w", s.table, err)
}

// explain turns Postgres's undefined_table error into one that says what
// to do.
func (s *Store) explain(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return &noTableError{table: s.table, err: err}
	}
	return err
}

type noTableError struct {
	table string
	err   error
}

func (e *noTableError) Error() string {
	return "table " + e.table + " does not exist: apply migrations (migrations.Up)"
}

func (e *noTableError) Is(target error) bool { return target == ErrNoTable }

func (e *noTableError) Unwrap() error { return e.err }
