package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/worker"
)

// logRuns writes runs of job id to the job log of pool, through
// pgjoblog: delivery 1 retried, delivery 2 succeeded with a result.
func logRuns(t *testing.T, pool *pgxpool.Pool, id string) {
	t.Helper()
	l, err := pgjoblog.New(pool, pgjoblog.FlushEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	job := func(delivery int32) *handler.Job {
		return &handler.Job{Topic: "emails", Partition: 2, Offset: 41, DeliveryCount: delivery,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}}}
	}
	l.JobFinished(job(1), worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Err: errors.New("smtp: 421 try later"), Duration: time.Second})
	ok := job(2)
	if err := ok.SetResult(map[string]string{"message_id": "m-1"}); err != nil {
		t.Fatal(err)
	}
	ok.Progress(100, "sent")
	time.Sleep(time.Millisecond) // a later end time than delivery 1's
	l.JobFinished(ok, worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Duration: 20 * time.Millisecond})
	cancel()
	if err := <-done; err != nil || l.Dropped() != 0 {
		t.Fatalf("job log: %v, %d dropped", err, l.Dropped())
	}
}

// show lists a job's runs from the job log, newest first, also for a job
// the outbox no longer knows; without runs it says there are none.
func TestJobsShowRuns(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	stdout, _, err := jobsRun(t, url, "show", "welcome-1")
	if err == nil {
		t.Fatalf("show of a job with no trace: no error\n%s", stdout)
	}
	enqueueJob(t, pool, "emails", "waiting", "")
	if stdout, _, err = jobsRun(t, url, "show", "waiting"); err != nil || !regexp.MustCompile(`(?m)^runs         none in the job log`).MatchString(stdout) {
		t.Fatalf("show of a job without runs: %v\n%s", err, stdout)
	}
	logRuns(t, pool, "welcome-1")
	stdout, _, err = jobsRun(t, url, "show", "welcome-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs show:\n%s", stdout)
	want := `(?m)^runs         2 in the job log, newest first
  \S+  delivery 2  succeeded \(accept\)  20ms  on emails/2@41  worker unknown
    progress 100% sent
    result   \{"message_id": "m-1"\}
  \S+  delivery 1  retried \(release\)  1s  on emails/2@41  worker unknown
    error    smtp: 421 try later
`
	if !regexp.MustCompile(want).MatchString(stdout) {
		t.Errorf("show's runs: want\n%s", want)
	}
	stdout, _, err = jobsRun(t, url, "show", "welcome-1", "-json")
	var js struct {
		Runs []jsonRun `json:"runs"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || len(js.Runs) != 2 || js.Runs[0].Delivery != 2 || js.Runs[1].Error != "smtp: 421 try later" {
		t.Fatalf("show -json: %v\n%s", err, stdout)
	}
}
