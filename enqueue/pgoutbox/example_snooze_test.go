package pgoutbox_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/worker"
)

// A webhook worker snoozes a job its endpoint rate-limits; the copies of
// long snoozes wait in the outbox (docs/limits.md shows these lines), and
// the claim middleware runs each job's effect once.
func ExampleSnoozer() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	claims, err := idempotency.Middleware(store)
	if err != nil {
		log.Fatal(err)
	}

	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		resp, err := post(ctx, job)
		if err != nil {
			return err // an attempt: retried with backoff, parked at the limit
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			if job.Snoozes() >= 10 {
				return handler.Permanent(errors.New("still rate limited after 10 snoozes"))
			}
			return handler.Snooze(retryAfter(resp)) // not an attempt
		}
		return nil
	})

	w, err := worker.New(
		worker.Group("webhooks"),
		worker.Handle("webhooks", claims(h)),     // claims: idempotency.Middleware on pgstore
		worker.SnoozeVia(pgoutbox.Snoozer(pool)), // optional: copies in Postgres
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Run(ctx)
}

// mailer is the worker of the package documentation's snooze section.
func mailer(pool *pgxpool.Pool, claims handler.Middleware, send handler.Handler) (*worker.Worker, error) {
	w, err := worker.New(worker.Group("mailer"),
		worker.Handle("emails", claims(send)), // claims: idempotency.Middleware on pgstore
		worker.SnoozeVia(pgoutbox.Snoozer(pool)))
	return w, err
}

// post calls the job's webhook.
func post(ctx context.Context, job *handler.Job) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://hooks.example.com/", nil)
	if err != nil {
		return nil, handler.Permanent(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	return resp, resp.Body.Close()
}

// retryAfter reads a 429's Retry-After seconds; a minute without one.
func retryAfter(resp *http.Response) time.Duration {
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Minute
}
