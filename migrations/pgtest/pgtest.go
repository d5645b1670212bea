// Package pgtest gives tests a Postgres of their own: a pool on a new,
// empty schema, dropped when the test ends, so tests run in parallel on
// one database. The database is SHAREQ_TEST_DATABASE_URL (make test sets
// it from scripts/postgres.sh); without it a test is skipped, except under
// CI=true, where a missing database is a failure. With a URL that asks
// for TLS only (sslmode=require, verify-ca, verify-full: scripts/postgres.sh
// tls-url), [NewPool] also checks that its connections are encrypted.
//
// It is a test kit: shareq's own Postgres tests (migrations, pgstore,
// pgoutbox, outboxmetrics, outboxfx, the commands) use it, and so may an
// app's tests of its handlers, with migrations.Up on the pool it returns.
// It lives in the migrations module, which every Postgres module's tests
// need anyway, so that no published module requires a test-only module;
// it needs pgx only, like package migrations.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	neturl "net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvURL names the environment variable with the test database's URL.
const EnvURL = "SHAREQ_TEST_DATABASE_URL"

// URL returns the test database's URL, or skips t (fails it under CI=true).
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(EnvURL + " is not set; CI must start Postgres and set it (scripts/postgres.sh)")
		}
		t.Skip(EnvURL + " is not set; skipping a test that needs Postgres")
	}
	return url
}

// SchemaURL returns the test database's URL with schema as its search
// path, for programs that take a database URL (the CLI, the examples).
func SchemaURL(t testing.TB, schema string) string {
	t.Helper()
	u, err := neturl.Parse(URL(t))
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Schema creates a new, empty schema in the test database and returns
// its name; the schema is dropped, with everything in it, when t ends.
func Schema(t testing.TB) string {
	t.Helper()
	url := URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "shareq_test_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{schema}.Sanitize()
	admin := func(ctx context.Context, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect to %s: %v", EnvURL, err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin(ctx, "CREATE SCHEMA "+ident)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin(ctx, "DROP SCHEMA "+ident+" CASCADE")
	})
	return schema
}

// NewPool returns a pool of at most maxConns connections whose
// search_path is a new, empty schema ([Schema]), and the schema's name.
// The pool is closed, then the schema dropped, when t ends.
func NewPool(t testing.TB, maxConns int32) (*pgxpool.Pool, string) {
	t.Helper()
	schema := Schema(t)
	cfg, err := pgxpool.ParseConfig(URL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the schema's drop: cleanups run last first
	if tlsWanted(cfg.ConnConfig.Config) {
		var ssl bool
		err := pool.QueryRow(t.Context(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
		if err != nil || !ssl {
			t.Fatalf("%s asks for TLS (sslmode=%s), but the connection is not encrypted (ssl %v, %v)", EnvURL, sslMode(t), ssl, err)
		}
	}
	return pool, schema
}

// tlsWanted reports whether the config connects with TLS only (sslmode
// require, verify-ca or verify-full: no plaintext fallback).
func tlsWanted(c pgconn.Config) bool {
	if c.TLSConfig == nil {
		return false
	}
	for _, f := range c.Fallbacks {
		if f.TLSConfig == nil {
			return false
		}
	}
	return true
}

func sslMode(t testing.TB) string {
	u, err := neturl.Parse(URL(t))
	if err != nil {
		return "?"
	}
	return u.Query().Get("sslmode")
}
