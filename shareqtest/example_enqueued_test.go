package shareqtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/shareqtest"
)

func ExampleRequireEnqueued() {
	t := &testing.T{} // in a test, the test's own t

	// The code under test enqueues through a Recorder instead of Kafka.
	var rec shareqtest.Recorder
	q, _ := enqueue.New(&rec)
	type Welcome struct {
		Email string `json:"email"`
	}
	_, _ = q.Enqueue(context.Background(), "emails", Welcome{Email: "ada@example.com"}, enqueue.ID("welcome-ada"))

	job := shareqtest.RequireEnqueued[Welcome](t, &rec, "emails")
	fmt.Println(job.Topic, job.ID, job.Value.Email)
	// Output: emails welcome-ada ada@example.com
}
