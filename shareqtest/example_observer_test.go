package shareqtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// A test of a worker built the way the app builds it (its own options and
// middleware, here worker.New's): run it on the Queue's broker with an
// Observer and wait for each job to finish for good. The Queue's group
// starts at the earliest offset, so the worker sees the jobs produced
// before it started.
func ExampleObserver() {
	t := &testing.T{} // in a test, the test's own t
	q := shareqtest.New(t, shareqtest.Topic("emails"))
	defer q.Close()
	welcome := q.ProduceJSON(t, Email{To: "ada@example.com"}, shareqtest.JobID("welcome-ada"))
	nobody := q.ProduceJSON(t, Email{Subject: "Hello?"}, shareqtest.JobID("nobody"))

	var obs shareqtest.Observer
	w, err := worker.New(
		worker.Brokers(q.Brokers()...),
		worker.Group(q.Group()),
		worker.Handle(q.Topic(), handler.JSON(sendEmail)),
		worker.Logger(shareqtest.Logger()),
		worker.Observers(&obs),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	for _, id := range []string{welcome, nobody} {
		e := obs.WaitJob(t, 30*time.Second, id)
		fmt.Printf("%s: %s, %s on delivery %d\n", e.ID, e.Result.Outcome, e.Result.Ack, e.Count)
	}
	cancel() // in a test, in t.Cleanup
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Output:
	// welcome-ada: succeeded, accept on delivery 1
	// nobody: discarded, reject on delivery 1
}

// TestWelcomeEmail is the test docs/testing.md shows ("The worker your
// app builds").
func TestWelcomeEmail(t *testing.T) {
	q := shareqtest.New(t, shareqtest.Topic("emails"))
	id := q.ProduceJSON(t, Email{To: "grace@example.com"}, shareqtest.JobID("welcome-grace"))

	var obs shareqtest.Observer
	w, err := worker.New( // or your app's constructor, with these options added
		worker.Brokers(q.Brokers()...),
		worker.Group(q.Group()),
		worker.Handle(q.Topic(), handler.JSON(sendEmail)),
		worker.Logger(shareqtest.Logger()), // quiet unless go test -v
		worker.Observers(&obs),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	e := obs.WaitJob(t, 30*time.Second, id)
	if e.Result.Outcome != worker.OutcomeSucceeded {
		t.Errorf("job %s: %v (%v), want succeeded", id, e.Result.Outcome, e.Result.Err)
	}
}
