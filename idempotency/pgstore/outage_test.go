package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// proxied returns a Store whose pool reaches Postgres through a proxy the
// test cuts, the proxy, and a direct pool on the same schema.
func proxied(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *cutproxy.Proxy, *pgxpool.Pool) {
	t.Helper()
	s, px, direct, _ := proxiedPool(t, 0, opts...)
	return s, px, direct
}

// proxiedPool is proxied with the store's pool, of maxConns connections
// (pgx's default for 0).
func proxiedPool(t *testing.T, maxConns int32, opts ...pgstore.Option) (*pgstore.Store, *cutproxy.Proxy, *pgxpool.Pool, *pgxpool.Pool) {
	t.Helper()
	direct, schema := newPool(t)
	if err := migrations.Up(t.Context(), direct); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := cutproxy.New(t, u.Host, false)
	u.Host = px.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s, px, direct, pool
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var u *handler.UnavailableError
	if !errors.As(err, &u) || u.Dependency != pgstore.Dependency {
		t.Fatalf("%s: %v, want a handler.UnavailableError of %q", what, err, pgstore.Dependency)
	}
}

func TestClaimDuringOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	s, px, direct := proxied(t)
	ctx := t.Context()
	claims := func(key string) int {
		return count(t, direct, "SELECT count(*) FROM shareq_processed_jobs WHERE key = $1", key)
	}

	// An ordinary SQL error of the handler is the job's, not an outage.
	_, err := s.Claim(ctx, "sql-error", func(ctx context.Context) error {
		_, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1/0")
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" || handler.IsUnavailable(err) {
		t.Fatalf("division by zero in the handler: %v, want the PgError 22012, not unavailable", err)
	}

	// The connection dies under the handler: its error is an outage.
	_, err = s.Claim(ctx, "handler-cut", func(ctx context.Context) error {
		px.Cut()
		_, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1")
		return err
	})
	wantUnavailable(t, "handler's statement on a cut connection", err)

	// Begin while Postgres is unreachable.
	_, err = s.Claim(ctx, "begin-cut", func(context.Context) error { return errors.New("must not run") })
	wantUnavailable(t, "begin on a cut proxy", err)
	px.Restore()

	// Commit on a connection that died after the handler succeeded.
	_, err = s.Claim(ctx, "commit-cut", func(ctx context.Context) error {
		if _, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		px.Cut()
		return nil
	})
	wantUnavailable(t, "commit on a cut connection", err)
	px.Restore()

	// Nothing was claimed during the outage; after it, every key claims.
	for _, k := range []string{"handler-cut", "begin-cut", "commit-cut"} {
		if n := claims(k); n != 0 {
			t.Fatalf("%s: %d claim rows after the outage, want 0", k, n)
		}
		ok, err := s.Claim(ctx, k, func(context.Context) error { return nil })
		if err != nil || !ok {
			t.Fatalf("Claim(%s) after the outage = %v, %v; want claimed", k, ok, err)
		}
	}
}

func TestClaimOnReadOnlyDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	// A primary that became a standby in a failover answers writes with
	// 25006 read_only_sql_transaction; a read-only session does the same.
	pool, _ := newPool(t)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	cfg := pool.Config()
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ro.Close)
	s, err := pgstore.New(ro)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Claim(t.Context(), "k", func(context.Context) error { return nil })
	wantUnavailable(t, "claim on a read-only database", err)
}
