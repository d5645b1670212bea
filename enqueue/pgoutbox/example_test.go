package pgoutbox_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/migrations"
)

// A signup writes the user and enqueues the welcome email in one
// transaction; a relay in the same program moves the job to Kafka.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	relay, err := pgoutbox.NewRelay(pool, cl)
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = relay.Run(ctx) }() // a real program waits for it at shutdown

	type Welcome struct {
		Email string `json:"email"`
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", "ada@example.com"); err != nil {
			return err
		}
		_, err := pgoutbox.EnqueueTx(ctx, tx, "emails", Welcome{Email: "ada@example.com"},
			enqueue.ID("welcome/ada@example.com"))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Welcome is the payload of a job on the "emails" topic.
type Welcome struct {
	Email string `json:"email"`
}

// signup writes the user and enqueues the welcome email in one
// transaction (the package documentation shows its lines).
func signup(ctx context.Context, pool *pgxpool.Pool, email string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // does nothing after Commit
	if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", email); err != nil {
		return err
	}
	if _, err := pgoutbox.EnqueueTx(ctx, tx, "emails", Welcome{Email: email}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// signupFunc does the same with pgx.BeginFunc (docs/enqueueing.md shows
// its lines).
func signupFunc(ctx context.Context, pool *pgxpool.Pool, email string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", email); err != nil {
			return err
		}
		_, err := pgoutbox.EnqueueTx(ctx, tx, "emails", Welcome{Email: email})
		return err
	})
	return err
}

// relay runs a relay until ctx is cancelled (the package documentation
// shows its lines).
func relay(ctx context.Context, pool *pgxpool.Pool, kgoClient *kgo.Client) error {
	relay, err := pgoutbox.NewRelay(pool, kgoClient)
	if err != nil {
		return err
	}
	return relay.Run(ctx) // blocks until ctx is cancelled
}

// FollowUp is the payload of the follow-up email, a day after a signup.
type FollowUp struct {
	Email string `json:"email"`
}

// A signup schedules a follow-up email for the next day, once per user
// however often the signup is retried; a user who unsubscribes before it
// is sent cancels it.
func ExampleEnqueueJobTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var jobID string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		jobID, err = scheduleFollowUp(ctx, tx, "ada@example.com")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := cancelFollowUp(ctx, pool, jobID); err != nil {
		log.Fatal(err)
	}
}

// scheduleFollowUp enqueues the follow-up email in tx (docs/enqueueing.md
// and the package documentation show its lines).
func scheduleFollowUp(ctx context.Context, tx pgx.Tx, email string) (string, error) {
	res, err := pgoutbox.EnqueueJobTx(ctx, tx, enqueue.NewJob("emails", FollowUp{Email: email}),
		pgoutbox.In(24*time.Hour), pgoutbox.Unique("follow-up/"+email))
	if err != nil {
		return "", err
	}
	if res.Duplicate {
		log.Printf("follow-up already scheduled as job %s", res.ID)
	}
	return res.ID, nil
}

// cancelFollowUp withdraws the follow-up email, or stops it when it is
// already in Kafka: the share group "mailer" claims its jobs on topic
// "emails" with idempotency.Middleware's defaults (the package
// documentation shows its lines).
func cancelFollowUp(ctx context.Context, pool *pgxpool.Pool, jobID string) error {
	res, err := pgoutbox.Cancel(ctx, pool, jobID,
		pgoutbox.ClaimKey(idempotency.Key("mailer", "emails", jobID)))
	if err != nil {
		return err
	}
	switch res {
	case pgoutbox.CancelWithdrawn, pgoutbox.CancelStopped:
		// it will not run
	case pgoutbox.CancelTooLate:
		log.Printf("job %s already ran", jobID)
	}
	return nil
}
