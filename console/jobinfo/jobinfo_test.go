package jobinfo_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

func testDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// enqueueLater enqueues job id on topic, due in d.
func enqueueLater(t *testing.T, pool *pgxpool.Pool, topic, id string, d time.Duration) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, map[string]int{"n": 1}, enqueue.ID(id)), pgoutbox.In(d), pgoutbox.Unique("u/"+id))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logRuns writes two runs of job id through pgjoblog: its record at
// offset 7 parked, its replay at offset 9 succeeded with a result.
func logRuns(t *testing.T, pool *pgxpool.Pool, topic, id string) {
	t.Helper()
	l, err := pgjoblog.New(pool, pgjoblog.FlushEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	job := func(offset int64) *handler.Job {
		return &handler.Job{Topic: topic, Partition: 0, Offset: offset, DeliveryCount: 1,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}}}
	}
	l.JobFinished(job(7), worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckReject, Err: errors.New("bad input"), Duration: time.Millisecond})
	ok := job(9)
	if err := ok.SetResult(map[string]string{"sent": "yes"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // a later start than the first run's
	l.JobFinished(ok, worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Duration: time.Millisecond})
	cancel()
	if err := <-done; err != nil || l.Dropped() != 0 {
		t.Fatalf("job log: %v, %d dropped", err, l.Dropped())
	}
}

// Find reads every table that knows of a job, and Timeline puts what they
// say in order with the job's DLQ records: a job for later is enqueued and
// then due; a produced job that ran, was parked, replayed and ran again
// reads enqueued (its DLQ record says when), produced, run, parked,
// replayed, run, claimed.
func TestFindAndTimeline(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := t.Context()

	none, err := jobinfo.Find(ctx, pool, "nobody", "")
	if err != nil || none.Found() || !none.JobLog || none.Claim.State != jobinfo.ClaimUnknown {
		t.Fatalf("a job nothing knows: %+v, %v", none, err)
	}

	enqueueLater(t, pool, "emails", "later-1", time.Hour)
	later, err := jobinfo.Find(ctx, pool, "later-1", "")
	if err != nil || !later.Found() || len(later.Outbox) != 1 || later.Outbox[0].Value == nil || later.Outbox[0].UniqueKey == nil || *later.Outbox[0].UniqueKey != "u/later-1" {
		t.Fatalf("a job for later: %+v, %v", later, err)
	}
	ev := jobinfo.Timeline(&later, nil, time.Now())
	if kinds(ev) != "enqueued due" || ev[0].Future || !ev[1].Future {
		t.Fatalf("a job for later's timeline: %s, %+v", kinds(ev), ev)
	}

	// Job run-1: produced, run once and parked, replayed, run again and
	// succeeded, its claim committed.
	logRuns(t, pool, "emails", "run-1")
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgoutbox.ProducedTable+` (job_id, produced_at) VALUES ('run-1', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key("mailers", "emails", "run-1")
	if _, err := pool.Exec(ctx, `INSERT INTO shareq_processed_jobs (key, claimed_at) VALUES ($1, now() + interval '1 second')`, key); err != nil {
		t.Fatal(err)
	}
	job, err := jobinfo.Find(ctx, pool, "run-1", key)
	if err != nil || !job.Found() || job.ProducedAt == nil || len(job.Runs) != 2 || job.Claim.State != jobinfo.ClaimRan || job.Claim.Key != key {
		t.Fatalf("a run job: %+v, %v", job, err)
	}
	// The DLQ record of offset 7, parked before the run's start as the
	// job log has it (its end less the handler's duration), and its replay
	// to offset 9, acknowledged after the start of the run of offset 9:
	// each follows what it came from all the same.
	first, second := job.Runs[1], job.Runs[0]
	parked := []dlq.Parked{{Envelope: dlq.Envelope{ParkedAt: first.Started.Add(-time.Millisecond), Reason: "permanent", DeliveryCount: 1,
		SourceTopic: "emails", SourceOffset: 7, EnqueuedAt: job.ProducedAt.Add(-time.Second)}, Topic: "emails.dlq", Offset: 3,
		Replays: []dlq.ReplayMark{{At: second.Started.Add(time.Millisecond), Topic: "emails", Offset: 9}}}}
	ev = jobinfo.Timeline(&job, parked, time.Now().Add(time.Hour))
	if got, want := kinds(ev), "enqueued produced run parked replayed run claimed"; got != want {
		t.Fatalf("timeline %q, want %q", got, want)
	}
	if ev[0].Row != nil || ev[0].Parked == nil || ev[2].Run.Offset != 7 || ev[5].Run.Offset != 9 || ev[5].Run.Outcome != "succeeded" || ev[4].Replay.Offset != 9 || ev[3].Parked.Topic != "emails.dlq" {
		t.Errorf("events: %+v", ev)
	}
	if !ev[3].At.Equal(parked[0].ParkedAt) {
		t.Errorf("the parking shown at %v, want its own time %v", ev[3].At, parked[0].ParkedAt)
	}

	cancelled, err := jobinfo.ReadClaim(ctx, pool, "no-such-key")
	if err != nil || cancelled.State != jobinfo.ClaimNone {
		t.Errorf("a claim key without a row: %+v, %v", cancelled, err)
	}
}

// List pages the scheduled jobs in due order, a topic at a time when
// asked; a cursor that is not one is refused.
func TestListScheduled(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	ctx := t.Context()
	for i, id := range []string{"c", "a", "b"} {
		enqueueLater(t, pool, "emails", id, time.Duration(i+1)*time.Hour)
	}
	enqueueLater(t, pool, "reports", "r", 30*time.Minute)
	var ids []string
	f := jobinfo.ListFilter{Topic: "emails", Scheduled: true, Limit: 2}
	for {
		p, err := jobinfo.List(ctx, pool, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			ids = append(ids, r.JobID)
		}
		if p.Next == "" {
			break
		}
		f.After = p.Next
	}
	if !slices.Equal(ids, []string{"c", "a", "b"}) {
		t.Errorf("pages of emails: %v, want c a b (due order)", ids)
	}
	if _, err := jobinfo.List(ctx, pool, jobinfo.ListFilter{Limit: 1, After: "yesterday"}); err == nil {
		t.Error("a bad cursor: no error")
	}
	if _, err := jobinfo.List(ctx, pool, jobinfo.ListFilter{}); err == nil {
		t.Error("limit 0: no error")
	}
}

func kinds(ev []jobinfo.Event) string {
	var s string
	for i, e := range ev {
		if i > 0 {
			s += " "
		}
		s += string(e.Kind)
	}
	return s
}
