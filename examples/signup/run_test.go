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
// twice is sent once; each follow-up is sent once, not before it is due,
// except the one withdrawn by the unsubscribe, and a double submit
// schedules no second one; the scheduler's cleanup runs.
func TestRun(t *testing.T) {
	t.Parallel()
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := run(ctx, config{DatabaseURL: schemaURL(t), Timeout: 2 * time.Minute, FollowUpIn: 2 * time.Second}, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("run: %v (summary %+v)", err, s)
	}
	// The relay also produced the cleanup's firings, one a second.
	if s.Relayed < 6 || s.Cleanups < 1 {
		t.Errorf("relayed %d, cleanups %d; want 6 emails and a cleanup at least", s.Relayed, s.Cleanups)
	}
	want := Summary{Run: s.Run, Committed: 3, RolledBack: 1, Relayed: s.Relayed, OnTopic: 5, Sent: 3, Duplicates: 2,
		FollowUpsScheduled: 3, DoubleSubmitRefused: true, FollowUpsCancelled: 1, FollowUpsSent: 2, Cleanups: s.Cleanups}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	for _, line := range []string{
		"signed up ada@example.com",
		"signup of mallory@spam.invalid rolled back",
		"the claim found it done, and it was not sent again",
		"follow-up already scheduled as job follow-up/" + s.Run + "/",
		"unsubscribed: follow-up follow-up/" + s.Run + "/",
		"withdrawn",
		"the worker sent 2 (none before its time: true)",
		"the scheduler (app signup, leading true) enqueued",
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
	if err != nil || cfg.DatabaseURL != "postgres://from-env" || cfg.Timeout != time.Minute || cfg.FollowUpIn != 2*time.Second {
		t.Errorf("no flags: %+v, %v; want the URL from DATABASE_URL and a minute", cfg, err)
	}
	cfg, err = parseFlags([]string{"-database", "postgres://flag", "-timeout", "5s", "-follow-up-in", "1m"}, &stderr)
	if err != nil || cfg.DatabaseURL != "postgres://flag" || cfg.Timeout != 5*time.Second || cfg.FollowUpIn != time.Minute {
		t.Errorf("flags: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"extra"}, &stderr); err == nil {
		t.Errorf("an extra argument was accepted")
	}
}
