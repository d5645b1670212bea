// Command signup shows the transactional enqueue of package
// enqueue/pgoutbox: a signup writes the user's row and enqueues the
// welcome email in one Postgres transaction, so a signup that rolls back
// sends no email and one that commits always does, exactly once; and it
// schedules a follow-up email for later, unique per user, that an
// unsubscribe withdraws; a periodic cleanup runs through the scheduler.
//
// It needs a Postgres database (it creates its tables in it) and nothing
// else: it starts an in-process Kafka broker.
//
//	go run ./examples/signup -database postgres://user:pass@localhost:5432/db
//
// Without -database (or $DATABASE_URL) it says so and exits.
//
// What happens:
//
//  1. A few signups each insert a user, enqueue a welcome email with
//     pgoutbox.EnqueueTx and schedule a follow-up email with
//     pgoutbox.EnqueueJobTx, due -follow-up-in later (pgoutbox.In, 2s
//     here, days in a real app) and unique per user (pgoutbox.Unique), in
//     one transaction. One of them fails its last check after the emails
//     were enqueued, and rolls back. The first form is submitted twice:
//     the second finds the user and its follow-up scheduled already
//     (Result.Duplicate), and adds no second follow-up. The second user
//     unsubscribes before the follow-up is due: pgoutbox.Cancel withdraws
//     it from the outbox.
//  2. A pgoutbox.Relay moves the committed emails from the outbox table to
//     Kafka (woken by LISTEN/NOTIFY), and deletes each row once the broker
//     has acknowledged it.
//  3. A worker "sends" each email: its handler records the email in the
//     claim's transaction of the idempotency middleware (idempotency/pgstore),
//     so the record and the claim commit together. The welcome email
//     enqueued again by the double submit has the same job ID, and the
//     claim sends it once. The follow-ups wait in the outbox until they
//     are due (shareq jobs list shows them); the relay wakes for them by
//     itself, and the worker sends them, none before its time.
//  4. A periodic cleanup (package scheduler, every second here, nightly
//     in a real app) deletes the example's users and emails older than a
//     day: the scheduler enqueues each firing through the outbox once,
//     whichever process of the app leads, and the worker runs it.
//  5. One email is put on the topic a second time with the same job ID, as
//     a relay that died between the broker's acknowledgement and its delete
//     would do; the claim finds the job done and it is not sent again.
//
// The files:
//
//	signup.go  the part to copy: the signup transaction, the handlers and their worker options
//	run.go     the wiring: broker, database, relay, worker, scheduler, and the checks
//	main.go    flags
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	DatabaseURL string        // Postgres; required
	Timeout     time.Duration // bound on the whole run
	FollowUpIn  time.Duration // how long after the signup the follow-up email is due
}

// errNoDatabase is returned when no database was given.
var errNoDatabase = errors.New("signup needs Postgres: pass -database postgres://… or set DATABASE_URL; skipping")

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("signup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DatabaseURL, "database", os.Getenv("DATABASE_URL"), "Postgres `URL` for the users, the outbox and the claims (default $DATABASE_URL)")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Minute, "give up after this long")
	fs.DurationVar(&cfg.FollowUpIn, "follow-up-in", 2*time.Second, "send the follow-up email this long after the signup (a real app: days)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(os.Stderr, errNoDatabase)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}
