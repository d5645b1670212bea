package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

func TestRelayCommand(t *testing.T) {
	pool, schema := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	brokers, cl := jobsCluster(t)
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueTx(t.Context(), tx, "jobs", map[string]string{"to": "ada"}, enqueue.ID("job-1"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.SchemaURL(t, schema)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"relay", "-database", dbURL, "-brokers", brokers}, &out, &errOut)
	}()
	r := readOne(t, cl)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v (%s)", err, errOut.String())
	}
	if enqueue.RecordID(r) != "job-1" {
		t.Fatalf("relayed job %q, want job-1", enqueue.RecordID(r))
	}
	if !strings.Contains(out.String(), "relayed 1 jobs") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestRelayCommandNeedsDatabase(t *testing.T) {
	t.Setenv(databaseEnv, "")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"relay"}, &out, &errOut); !errors.Is(err, errUsage) {
		t.Fatalf("relay without -database: %v", err)
	}
}
