package idempotency_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
)

// A job delivered twice (here by hand; in a worker after a lock expiry or
// a lost ACCEPT) runs once. The second delivery is accepted without
// running the handler.
func ExampleMiddleware() {
	store := idempotency.NewMemoryStore()
	claims, err := idempotency.Middleware(store,
		idempotency.OnDuplicate(func(job *handler.Job, key string) {
			fmt.Println("duplicate suppressed:", key)
		}),
	)
	if err != nil {
		panic(err)
	}

	sendEmail := handler.Func(func(ctx context.Context, job *handler.Job) error {
		// With a transactional store, write side effects through the
		// claim's transaction: pgstore.Tx(ctx).Exec(ctx, ...).
		fmt.Printf("sending %s\n", job.Value)
		return nil
	})
	h := handler.Chain(sendEmail, claims)

	job := &handler.Job{
		Group:   "mailers",
		Topic:   "emails",
		Value:   []byte("welcome mail to ada@example.com"),
		Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte("signup-42")}},
	}
	for range 2 {
		if err := h.Handle(context.Background(), job); err != nil {
			fmt.Println("error:", err)
		}
	}
	// Output:
	// sending welcome mail to ada@example.com
	// duplicate suppressed: mailers/emails/signup-42
}

// A batch handler's jobs claimed together (idempotency.Batch inside
// handler.Batch): the job claimed before is not run again, the one that
// fails keeps its claim free for its retry, the others are claimed with
// the batch's writes.
func ExampleBatch() {
	store := idempotency.NewMemoryStore()
	insert, err := idempotency.Batch(store, func(ctx context.Context, jobs []*handler.Job) []error {
		// With pgstore, write every row through the one claim
		// transaction: pgstore.Tx(ctx).CopyFrom(ctx, ...).
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			if string(j.Value) == "bad" {
				errs[i] = errors.New("row rejected by the upstream")
				continue
			}
			fmt.Println("insert", j.ID())
		}
		return errs
	}, idempotency.OnDuplicate(func(job *handler.Job, key string) {
		fmt.Println("duplicate suppressed:", job.ID())
	}))
	if err != nil {
		panic(err)
	}
	row := func(id, value string) *handler.Job {
		return &handler.Job{Group: "loader", Topic: "rows", Value: []byte(value),
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}}}
	}
	insert(context.Background(), []*handler.Job{row("r1", "a"), row("r2", "b")})
	// A worker calls insert through handler.Batch; here by hand: r1 is a
	// duplicate delivery, r3 fails.
	errs := insert(context.Background(), []*handler.Job{row("r1", "a"), row("r3", "bad"), row("r4", "c")})
	fmt.Println("outcomes:", errs)
	// Output:
	// insert r1
	// insert r2
	// insert r4
	// duplicate suppressed: r1
	// outcomes: [<nil> row rejected by the upstream <nil>]
}
