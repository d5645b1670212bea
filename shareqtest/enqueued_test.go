package shareqtest_test

import (
	"testing"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/shareqtest"
)

type welcome struct {
	Email string `json:"email"`
}

// signUp is code under test: it enqueues a welcome email.
func signUp(t *testing.T, q *enqueue.Client, email string) string {
	id, err := q.Enqueue(t.Context(), "emails", welcome{Email: email}, enqueue.Key([]byte(email)))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRequireEnqueuedWithRecorder(t *testing.T) {
	t.Parallel()
	var rec shareqtest.Recorder
	q, err := enqueue.New(&rec)
	if err != nil {
		t.Fatal(err)
	}
	shareqtest.RequireNotEnqueued(t, &rec, "emails")
	id := signUp(t, q, "ada@example.com")

	job := shareqtest.RequireEnqueued[welcome](t, &rec, "emails")
	if job.ID != id || job.Value.Email != "ada@example.com" || string(job.Key) != "ada@example.com" {
		t.Fatalf("enqueued %+v, want ada's welcome with ID %s", job, id)
	}
	signUp(t, q, "grace@example.com")
	jobs := shareqtest.RequireEnqueuedMany[welcome](t, &rec, "emails")
	if len(jobs) != 2 || jobs[1].Value.Email != "grace@example.com" || jobs[1].Record.Offset != 1 {
		t.Fatalf("enqueued %+v, want ada then grace", jobs)
	}
	shareqtest.RequireNotEnqueued(t, &rec, "other")
}

func TestRequireEnqueuedOnQueue(t *testing.T) {
	t.Parallel()
	q := shareqtest.New(t, shareqtest.Topic("emails"), shareqtest.Partitions(2))
	eq, err := enqueue.New(q.Client())
	if err != nil {
		t.Fatal(err)
	}
	id := signUp(t, eq, "ada@example.com")
	job := shareqtest.RequireEnqueued[welcome](t, q, "emails")
	if job.ID != id || job.Value.Email != "ada@example.com" {
		t.Fatalf("enqueued %+v, want ada's welcome with ID %s", job, id)
	}
}
