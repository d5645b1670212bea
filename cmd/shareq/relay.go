package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
)

const relayUsage = `usage: shareq relay -database URL [flags]

Move jobs enqueued with enqueue/pgoutbox from the outbox table to Kafka,
until interrupted. Several relays may run against one database. The
outbox table must exist (migrations.Up creates it).
`

const databaseEnv = "SHAREQ_DATABASE_URL"

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shareq relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cluster := addClusterFlags(fs)
	database := fs.String("database", os.Getenv(databaseEnv), "Postgres URL; $"+databaseEnv+" sets the default")
	batch := fs.Int("batch", pgoutbox.BatchSizeDefault, "rows per round")
	fs.Usage = func() { fmt.Fprint(stderr, relayUsage, "\nflags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *database == "" {
		fs.Usage()
		return errUsage
	}
	pool, err := pgxpool.New(ctx, *database)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer pool.Close()
	cl, err := cluster.client(enqueue.ProducerOpts()...)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer cl.Close()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	r, err := pgoutbox.NewRelay(pool, cl, pgoutbox.BatchSize(*batch), pgoutbox.Logger(log))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "relaying from", pgoutbox.Table, "to", *cluster.brokers)
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	s := r.Stats()
	fmt.Fprintf(stdout, "relayed %d jobs (%d produce failures, %d database errors)\n", s.Produced, s.Failures, s.DBErrors)
	return nil
}
