package shareqtest_test

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// Email is the payload of a job on the "emails" topic.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// sendEmail is the handler under test: it accepts a job with a valid
// address and fails permanently (a retry cannot fix it) on one without.
func sendEmail(ctx context.Context, job *handler.Job, e Email) error {
	if _, err := mail.ParseAddress(e.To); err != nil {
		return handler.Permanent(fmt.Errorf("recipient %q: %w", e.To, err))
	}
	return nil // deliver the email here
}

// A test of a JSON handler: a good job is accepted, a job whose payload is
// not JSON and a job without a valid address are rejected, each with its
// reason.
func Example() {
	// In a test, t is the test's *testing.T and closes the Queue when the
	// test ends; an Example has none.
	t := &testing.T{}
	q := shareqtest.New(t, shareqtest.Topic("emails"))
	defer q.Close()

	welcome := q.ProduceJSON(t, Email{To: "ada@example.com", Subject: "Welcome"}, shareqtest.JobID("welcome-ada"))
	garbled := q.Produce(t, []byte(`{"to": "grace@`), shareqtest.JobID("garbled"))
	nobody := q.ProduceJSON(t, Email{Subject: "Hello?"}, shareqtest.JobID("nobody"))

	res := q.Run(t, handler.JSON(sendEmail))

	res.RequireAccepted(t, welcome)
	res.RequireRejected(t, garbled, handler.ReasonDecode)
	res.RequireRejected(t, nobody, handler.ReasonPermanent)
	res.RequireCounts(t, shareqtest.Counts{Accepted: 1, Rejected: 2})

	for _, j := range res.Jobs() {
		fmt.Printf("%s: %s; reason %q\n", j.ID, j.Outcome, j.Reason)
	}
	// Output:
	// welcome-ada: accepted; reason ""
	// garbled: rejected; reason "decode"
	// nobody: rejected; reason "permanent"
}

// A test of retries: a job that fails twice with a temporary error is
// released twice and accepted on its third delivery; a job that always
// fails is released on every delivery and archived by the broker at the
// delivery limit.
func Example_retry() {
	t := &testing.T{} // a test's t, in a real test
	q := shareqtest.New(t, shareqtest.DeliveryLimit(3))
	defer q.Close()

	flaky := q.Produce(t, []byte("flaky"), shareqtest.JobID("flaky"))
	doomed := q.Produce(t, []byte("doomed"), shareqtest.JobID("doomed"))

	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Value) == "doomed" || job.DeliveryCount < 3 {
			return handler.Retry("upstream-503", errors.New("upstream answered 503"))
		}
		return nil
	})
	res := q.Run(t, h, worker.Concurrency(2))

	res.RequireAccepted(t, flaky)
	res.RequireReleased(t, flaky, 2)
	res.RequireArchived(t, doomed)
	res.RequireReleased(t, doomed, 3)

	for _, j := range res.Jobs() {
		fmt.Printf("%s: %s after %d deliveries, %d released; reason %q\n", j.ID, j.Outcome, len(j.Deliveries), j.Releases(), j.Reason)
	}
	// Output:
	// flaky: accepted after 3 deliveries, 2 released; reason ""
	// doomed: archived after 3 deliveries, 3 released; reason "upstream-503"
}

// With DLQ, the handler runs inside the dlq middleware as in production:
// a job that fails on its last delivery is parked in "jobs.dlq" instead of
// being archived, and so is a permanent failure, at once.
func Example_deadLetter() {
	t := &testing.T{} // a test's t, in a real test
	q := shareqtest.New(t, shareqtest.DLQ(), shareqtest.DeliveryLimit(2))
	defer q.Close()

	doomed := q.Produce(t, []byte("doomed"), shareqtest.JobID("doomed"))
	poison := q.Produce(t, []byte("poison"), shareqtest.JobID("poison"))

	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Value) == "poison" {
			return handler.Permanent(errors.New("cannot ever work"))
		}
		return errors.New("still failing")
	})
	res := q.Run(t, h)

	res.RequireParked(t, doomed, handler.ReasonDeliveryLimit)
	res.RequireParked(t, poison, handler.ReasonPermanent)

	for _, j := range res.Jobs() {
		fmt.Printf("%s: %s after %d deliveries; reason %q\n", j.ID, j.Outcome, len(j.Deliveries), j.Reason)
	}
	// Output:
	// doomed: parked after 2 deliveries; reason "delivery-limit"
	// poison: parked after 1 deliveries; reason "permanent"
}

// A test of a batch handler (handler.Batch): the jobs run in calls of up
// to 3, and each job's outcome is its own: the bad row of a batch is
// rejected alone, the others accepted.
func Example_batch() {
	t := &testing.T{} // a test's t, in a real test
	q := shareqtest.New(t)
	defer q.Close()

	var ids []string
	for _, row := range []string{"a", "b", "bad", "c"} {
		ids = append(ids, q.Produce(t, []byte(row), shareqtest.JobID("row-"+row)))
	}
	insert := handler.Batch(3, 50*time.Millisecond, func(ctx context.Context, jobs []*handler.Job) []error {
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			if string(j.Value) == "bad" {
				errs[i] = handler.Permanent(errors.New("row does not fit the table"))
			}
		}
		return errs // insert the good rows in one statement here
	})
	res := q.Run(t, insert, worker.Concurrency(3))

	res.RequireAccepted(t, ids[0], ids[1], ids[3])
	res.RequireRejected(t, ids[2], handler.ReasonPermanent)
	for _, j := range res.Jobs() {
		fmt.Printf("%s: %s\n", j.ID, j.Outcome)
	}
	// Output:
	// row-a: accepted
	// row-b: accepted
	// row-bad: rejected
	// row-c: accepted
}

// TestSendEmail is the test the package documentation shows.
func TestSendEmail(t *testing.T) {
	q := shareqtest.New(t, shareqtest.Topic("emails"))
	ok := q.ProduceJSON(t, Email{To: "ada@example.com"})
	bad := q.Produce(t, []byte("{oops"), shareqtest.JobID("bad-1"))

	res := q.Run(t, handler.JSON(sendEmail))

	res.RequireAccepted(t, ok)
	res.RequireRejected(t, bad, handler.ReasonDecode)
}
