package main

// This file is the part to copy: a signup that enqueues its welcome email
// in its own transaction and schedules a follow-up email for later, the
// handlers that send them once, the worker options that put them on
// their topics inside the claim middleware, and a periodic cleanup. It
// knows nothing about the demo's broker or its checks; see run.go for the
// wiring.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/scheduler"
	"github.com/shareq/shareq/worker"
)

// The topics of the welcome emails, of the follow-ups and of the
// cleanups.
const (
	emailsTopic    = "welcome-emails"
	followUpsTopic = "follow-up-emails"
	cleanupTopic   = "signup-cleanup"
)

// Welcome is the job: the JSON that pgoutbox.EnqueueTx writes and
// handler.JSON decodes.
type Welcome struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// FollowUp is the job of the follow-up email, sent a while after the
// signup ("how is it going?").
type FollowUp struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// errBlocked is the signup's last check failing, after the email was
// enqueued.
var errBlocked = errors.New("signup: the address's domain is blocked")

// signedUp is what a signup did.
type signedUp struct {
	UserID   int64
	JobID    string          // the welcome email's job
	FollowUp pgoutbox.Result // the follow-up's job; Duplicate on a double submit
}

// signup creates the user (or finds it: a form submitted twice signs up
// once), enqueues the welcome email and schedules the follow-up email
// followUpIn from now, in one transaction. When any step fails the
// transaction rolls back, the jobs with it: no email for a user who does
// not exist.
func signup(ctx context.Context, pool *pgxpool.Pool, run, email string, followUpIn time.Duration) (res signedUp, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO signup_users (run, email) VALUES ($1, $2)
			ON CONFLICT (run, email) DO UPDATE SET email = excluded.email RETURNING id`, run, email).Scan(&res.UserID)
		if err != nil {
			return fmt.Errorf("insert user: %w", err)
		}
		userID := res.UserID
		// The job ID is derived from the user: whoever enqueues this
		// email again (a retried request) enqueues the same job, and the
		// worker's claim sends it once.
		res.JobID, err = pgoutbox.EnqueueTx(ctx, tx, emailsTopic, Welcome{UserID: userID, Email: email},
			enqueue.ID(fmt.Sprintf("welcome/%s/%d", run, userID)))
		if err != nil {
			return err
		}
		// The follow-up waits in the outbox until it is due (In: by
		// Postgres's clock; a real app says 72*time.Hour), and is unique
		// per user while it waits: a second submit finds it scheduled
		// (Duplicate, the first job's ID) and adds no second one.
		key := fmt.Sprintf("follow-up/%s/%d", run, userID)
		res.FollowUp, err = pgoutbox.EnqueueJobTx(ctx, tx,
			enqueue.NewJob(followUpsTopic, FollowUp{UserID: userID, Email: email}, enqueue.ID(key)),
			pgoutbox.In(followUpIn), pgoutbox.Unique(key))
		if err != nil {
			return err
		}
		// A last check that fails after the enqueue, to show that the
		// rollback takes the job with it.
		if strings.HasSuffix(email, ".invalid") {
			return errBlocked
		}
		return nil
	})
	return res, err
}

// unsubscribe is the user asking for no more emails: their follow-up, if
// it still waits in the outbox, is withdrawn and never sent.
func unsubscribe(ctx context.Context, pool *pgxpool.Pool, followUpID string) (pgoutbox.CancelResult, error) {
	return pgoutbox.Cancel(ctx, pool, followUpID)
}

// workerOptions are the worker options of the app's jobs: each handler on
// its topic, inside the claim middleware, which runs each job to
// completion at most once and gives the handler the claim's transaction.
// The claims are rows in pool (idempotency/pgstore); onDuplicate hears of
// each delivery the claim found done.
func workerOptions(pool *pgxpool.Pool, onDuplicate func(job *handler.Job, key string)) ([]worker.Option, error) {
	store, err := pgstore.New(pool)
	if err != nil {
		return nil, err
	}
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(onDuplicate))
	if err != nil {
		return nil, err
	}
	return []worker.Option{
		worker.Handle(emailsTopic, handler.JSON(sendWelcome), claims),
		worker.Handle(followUpsTopic, handler.JSON(sendFollowUp), claims),
		worker.Handle(cleanupTopic, handler.JSON(cleanUp), claims),
	}, nil
}

// sendWelcome "sends" the email: it records it in sent_emails through the
// claim's transaction, so the record and the claim commit together and a
// job delivered twice is sent once. A real mailer is not transactional:
// pass it job.ID() as its idempotency key, so that a handler that fails
// after the call and runs again does not send twice.
func sendWelcome(ctx context.Context, job *handler.Job, w Welcome) error {
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("no claim transaction: wrap the handler in idempotency.Middleware with a pgstore.Store"))
	}
	_, err := tx.Exec(ctx, "INSERT INTO signup_emails (job_id, user_id, email) VALUES ($1, $2, $3)", job.ID(), w.UserID, w.Email)
	return err
}

// sendFollowUp "sends" the follow-up the same way.
func sendFollowUp(ctx context.Context, job *handler.Job, f FollowUp) error {
	return sendWelcome(ctx, job, Welcome(f))
}

// keepFor is how long the example keeps its users and emails.
const keepFor = 24 * time.Hour

// Cleanup is the periodic job: delete the users and emails older than
// Before.
type Cleanup struct {
	Before time.Time `json:"before"`
}

// cleanupSchedule fires every "every" (a real app: once a night,
// scheduler.MustParseCron("0 3 * * *")). The scheduler runs in every
// process of the app, one of them fires, and each firing is one job (its
// ID app/name/time), however many processes run. A firing missed while
// none ran is skipped (the next one deletes as much).
func cleanupSchedule(every time.Duration) scheduler.Schedule {
	return scheduler.Schedule{
		Name: "cleanup",
		Spec: scheduler.Every(every),
		Job: func(_ context.Context, at time.Time) (enqueue.Job, error) {
			return enqueue.NewJob(cleanupTopic, Cleanup{Before: at.Add(-keepFor)}), nil
		},
	}
}

// cleanUp deletes what is older than c.Before, and records the run, in
// the claim's transaction: one cleanup per firing.
func cleanUp(ctx context.Context, job *handler.Job, c Cleanup) error {
	tx := pgstore.Tx(ctx)
	if tx == nil {
		return handler.Permanent(errors.New("no claim transaction: wrap the handler in idempotency.Middleware with a pgstore.Store"))
	}
	emails, err := tx.Exec(ctx, "DELETE FROM signup_emails WHERE sent_at < $1", c.Before)
	if err != nil {
		return err
	}
	users, err := tx.Exec(ctx, "DELETE FROM signup_users u WHERE created_at < $1 AND NOT EXISTS (SELECT 1 FROM signup_emails e WHERE e.user_id = u.id)", c.Before)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO signup_cleanups (job_id, users_deleted, emails_deleted) VALUES ($1, $2, $3)",
		job.ID(), users.RowsAffected(), emails.RowsAffected())
	return err
}
