package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations/pgtest"
)

// schemaURL returns the test database's URL with a new, empty schema of
// the test's own as the search path (dropped when the test ends).
func schemaURL(t *testing.T) string {
	t.Helper()
	return pgtest.SchemaURL(t, pgtest.Schema(t))
}

// The whole example on the embedded broker and real Postgres: each
// committed signup's email is sent once, the rolled-back signup leaves no
// user and sends nothing, the outbox ends empty, and a job delivered
// twice is sent once.
func TestRun(t *testing.T) {
	t.Parallel()
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, config{DatabaseURL: schemaURL(t), Timeout: 2 * time.Minute}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("run: %v (summary %+v)", err, s)
	}
	want := Summary{Run: s.Run, Committed: 3, RolledBack: 1, Relayed: 3, OnTopic: 4, Sent: 3, Duplicates: 1}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	for _, line := range []string{
		"signed up ada@example.com",
		"signup of mallory@spam.invalid rolled back",
		"the claim found it done, and it was not sent again",
	} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// Without a database the program says what it needs.
func TestRunWithoutDatabase(t *testing.T) {
	t.Parallel()
	var stdout, stderr logbuf.Buffer
	if _, err := run(t.Context(), config{}, &stdout, &stderr); !errors.Is(err, errNoDatabase) {
		t.Fatalf("run without a database = %v, want errNoDatabase", err)
	}
	if !strings.Contains(errNoDatabase.Error(), "-database") || !strings.Contains(errNoDatabase.Error(), "DATABASE_URL") {
		t.Errorf("the message %q does not say how to give a database", errNoDatabase)
	}
}

func TestFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://from-env")
	var stderr bytes.Buffer
	cfg, err := parseFlags(nil, &stderr)
	if err != nil || cfg.DatabaseURL != "postgres://from-env" || cfg.Timeout != time.Minute {
		t.Errorf("no flags: %+v, %v; want the URL from DATABASE_URL and a minute", cfg, err)
	}
	cfg, err = parseFlags([]string{"-database", "postgres://flag", "-timeout", "5s"}, &stderr)
	if err != nil || cfg.DatabaseURL != "postgres://flag" || cfg.Timeout != 5*time.Second {
		t.Errorf("flags: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"extra"}, &stderr); err == nil {
		t.Errorf("an extra argument was accepted")
	}
}
