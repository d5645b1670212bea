package idempotency_test

import (
	"context"
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
