package main

// This file is the part to copy: a signup that enqueues its welcome email
// in its own transaction, and the handler that sends it once.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
)

// emailsTopic is the topic of the welcome emails.
const emailsTopic = "welcome-emails"

// Welcome is the job: the JSON that pgoutbox.EnqueueTx writes and
// handler.JSON decodes.
type Welcome struct {
	UserID int64  `json:"user_id"`
	Email  string `json:"email"`
}

// errBlocked is the signup's last check failing, after the email was
// enqueued.
var errBlocked = errors.New("signup: the address's domain is blocked")

// signup creates the user and enqueues the welcome email in one
// transaction, and returns the user's ID and the job's ID. When any step
// fails the transaction rolls back, the job with it: no email for a user
// who does not exist.
func signup(ctx context.Context, pool *pgxpool.Pool, run, email string) (userID int64, jobID string, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "INSERT INTO signup_users (run, email) VALUES ($1, $2) RETURNING id", run, email).Scan(&userID); err != nil {
			return fmt.Errorf("insert user: %w", err)
		}
		// The job ID is derived from the user: whoever enqueues this
		// email again (a retried request) enqueues the same job.
		var err error
		jobID, err = pgoutbox.EnqueueTx(ctx, tx, emailsTopic, Welcome{UserID: userID, Email: email},
			enqueue.ID(fmt.Sprintf("welcome/%s/%d", run, userID)))
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
	return userID, jobID, err
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
