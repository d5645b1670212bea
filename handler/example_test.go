package handler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shareq/shareq/handler"
)

type welcomeEmail struct {
	To string `json:"to"`
}

// A typed handler: the payload is decoded before the function runs, and a
// payload that does not decode is a permanent failure.
func ExampleJSON() {
	send := handler.JSON(func(ctx context.Context, job *handler.Job, e welcomeEmail) error {
		if e.To == "" {
			return handler.Permanent(errors.New("no recipient")) // retrying cannot help
		}
		fmt.Printf("sending to %s (delivery %d)\n", e.To, job.DeliveryCount)
		return nil // ACCEPT
	})

	ctx := context.Background()
	_ = send.Handle(ctx, &handler.Job{Value: []byte(`{"to":"ada@example.com"}`), DeliveryCount: 1})
	err := send.Handle(ctx, &handler.Job{Value: []byte(`not json`)})
	fmt.Println(handler.IsPermanent(err), handler.ReasonOf(err))
	err = send.Handle(ctx, &handler.Job{Value: []byte(`{}`)})
	fmt.Println(handler.IsPermanent(err), handler.ReasonOf(err))
	// Output:
	// sending to ada@example.com (delivery 1)
	// true decode
	// true permanent
}

// Middleware wraps a handler; the first listed runs outermost.
func ExampleChain() {
	tag := func(name string) handler.Middleware {
		return func(next handler.Handler) handler.Handler {
			return handler.Func(func(ctx context.Context, job *handler.Job) error {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next.Handle(ctx, job)
			})
		}
	}
	h := handler.Chain(handler.Func(func(context.Context, *handler.Job) error {
		fmt.Println("handle")
		return nil
	}), tag("outer"), tag("inner"))
	_ = h.Handle(context.Background(), &handler.Job{})
	// Output:
	// enter outer
	// enter inner
	// handle
	// leave inner
	// leave outer
}

// A job's ID is the producer's shareq-job-id header, else its position.
func ExampleJob_ID() {
	j := &handler.Job{Topic: "emails", Partition: 2, Offset: 17}
	fmt.Println(j.ID())
	j.Headers = []handler.Header{{Key: handler.JobIDHeader, Value: []byte("signup-4711")}}
	fmt.Println(j.ID())
	// Output:
	// emails/2/17
	// signup-4711
}

// Batch runs a topic's jobs in calls of up to 100, each job with its own
// outcome: register it with worker.Handle like any handler, with a
// worker.Concurrency of at least 100 (each job of a batch holds a slot).
func ExampleBatch() {
	insert := handler.Batch(100, 50*time.Millisecond, func(ctx context.Context, jobs []*handler.Job) []error {
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			if len(j.Value) == 0 {
				errs[i] = handler.Permanent(errors.New("empty row")) // rejected (or parked) alone
			}
		}
		// Insert the other jobs' rows in one statement here; an error for
		// all of them retries them all.
		return errs
	})
	fmt.Println(insert.BatchSize())
	// Output: 100
}
