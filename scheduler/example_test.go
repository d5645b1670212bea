package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/scheduler"
)

// Invoices is the job of the nightly invoice run.
type Invoices struct{}

// The next firings of two schedules. (New connects to nothing: Run
// does, and the pool connects lazily.)
func ExampleScheduler_Upcoming() {
	pool, err := pgxpool.New(context.Background(), "postgres://localhost/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	s, err := scheduler.New(pool, scheduler.App("billing"),
		scheduler.Add(scheduler.Schedule{
			Name:   "invoices",
			Spec:   scheduler.MustParseCron("0 3 * * MON-FRI"),
			Topic:  "invoices",
			Value:  Invoices{},
			Missed: scheduler.RunLast,
		}),
		scheduler.Add(scheduler.Schedule{Name: "sync", Spec: scheduler.Every(6 * time.Hour), Topic: "sync", Value: "all"}))
	if err != nil {
		panic(err)
	}
	for _, f := range s.Upcoming(time.Date(2026, 1, 2, 1, 0, 0, 0, time.UTC), 2) { // a Friday
		fmt.Println(f.At.Format("Mon 15:04"), f.Schedule)
	}
	// Output:
	// Fri 03:00 invoices
	// Fri 06:00 sync
	// Fri 12:00 sync
	// Mon 03:00 invoices
}

func run(ctx context.Context, pool *pgxpool.Pool) error {
	s, err := scheduler.New(pool, scheduler.App("billing"),
		scheduler.Add(scheduler.Schedule{
			Name:   "invoices",
			Spec:   scheduler.MustParseCron("0 3 * * *"), // 03:00 UTC
			Topic:  "invoices",
			Value:  Invoices{},
			Missed: scheduler.RunLast,
		}))
	if err != nil {
		return err
	}
	go s.Run(ctx) // and wait for it on shutdown
	return nil
}

// Due is the job of a reminder run.
type Due struct{ Before time.Time }

// A schedule whose job is built at firing time, from the firing's time.
// (No Output: it needs a database to run.)
func ExampleSchedule() {
	reminders := scheduler.Schedule{
		Name: "reminders",
		Spec: scheduler.Every(time.Minute),
		Job: func(ctx context.Context, at time.Time) (enqueue.Job, error) {
			return enqueue.NewJob("reminders", Due{Before: at.Add(time.Hour)}), nil
		},
	}
	_ = run // New and Run, as in the package documentation
	_ = reminders
}
