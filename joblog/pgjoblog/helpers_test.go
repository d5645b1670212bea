package pgjoblog

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// waitTimeout bounds every wait on a condition: generous, for a loaded
// CI box.
const waitTimeout = 60 * time.Second

// waitFor polls cond until it holds, or fails t after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// migrated returns a pool on a new schema with the migrations applied.
func migrated(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 8)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// start runs l until t ends.
func start(t testing.TB, l *Log) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// lines records the log's lines.
type lines struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

// count returns the number of lines at level.
func (l *lines) count(level slog.Level) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level {
			n++
		}
	}
	return n
}

// switchable is a DB that fails while down is set: a Postgres outage
// without stopping the shared Postgres.
type switchable struct {
	*pgxpool.Pool
	down atomic.Bool
}

var errDown = errors.New("test: Postgres is down")

func (s *switchable) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if s.down.Load() {
		return pgconn.CommandTag{}, errDown
	}
	return s.Pool.Exec(ctx, sql, args...)
}

func (s *switchable) Begin(ctx context.Context) (pgx.Tx, error) {
	if s.down.Load() {
		return nil, errDown
	}
	return s.Pool.Begin(ctx)
}

// rowCount is the number of rows of the job log.
func rowCount(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
