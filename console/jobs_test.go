package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

// jobsDB is a pool on a schema of its own with the migrations applied.
func jobsDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// enqueueIn enqueues job id on topic into the outbox, due in d.
func enqueueIn(t *testing.T, pool *pgxpool.Pool, topic, id string, d time.Duration) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, map[string]int{"n": 1}, enqueue.ID(id)), pgoutbox.In(d))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logRun writes a run of job id into the job log of pool.
func logRun(t *testing.T, pool *pgxpool.Pool, topic, id string, delivery int32, res worker.Result) {
	t.Helper()
	l, err := pgjoblog.New(pool, pgjoblog.FlushEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	l.JobFinished(&handler.Job{Topic: topic, Offset: 1000, DeliveryCount: delivery, Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}}}, res)
	cancel()
	if err := <-done; err != nil || l.Dropped() != 0 {
		t.Fatalf("job log: %v, %d dropped", err, l.Dropped())
	}
}

// The job page puts together the outbox, the job log and the DLQ topics:
// a job enqueued, run and parked shows each, oldest first, with a link to
// its DLQ record; the search box of every page leads there; the claim is
// read once the page knows the job's group; an ID nothing knows is a 404
// that lists what was searched.
func TestJobPage(t *testing.T) {
	t.Parallel()
	pool := jobsDB(t)
	b := setup(t, console.Outbox(pool))
	enqueueIn(t, pool, b.topic, "job-1", 0)
	// Enqueued a minute before it ran (a run's start is its end less its
	// duration, on this process's clock).
	if _, err := pool.Exec(t.Context(), `UPDATE `+pgoutbox.Table+` SET created_at = created_at - interval '1 minute', due_at = due_at - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	logRun(t, pool, b.topic, "job-1", 1, worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckReject, Err: errors.New("<b>bad</b> input"), Duration: 3 * time.Millisecond})
	b.park(t, 0, 2) // job-0 and job-1

	_, overview := b.get(t, "/")
	mustContain(t, "overview", overview, `<form class="search" method="get" action="/jobs"`, `name="q"`)
	code, body := b.get(t, "/jobs?q="+url.QueryEscape(" job-1 "))
	if code != http.StatusOK {
		t.Fatalf("search job-1: %d\n%s", code, body)
	}
	mustContain(t, "job-1", body, "<h1>Job job-1</h1>", "Enqueued in the outbox for "+b.topic, "Run, delivery 1: parked",
		"&lt;b&gt;bad&lt;/b&gt; input", "Parked in "+b.dlq, `href="/dlq/`+b.dlq+`/0/1"`, "<small>reason</small> decode",
		"not read: the share group that runs the job is not known", "<small>ack</small> reject", "<small>duration</small> 3ms", "<small>record</small> "+b.topic+"/0/1000")
	mustNotContain(t, "job-1", body, "<b>bad", "not configured", "failed")
	order := []string{"Enqueued in the outbox", "Run, delivery 1", "Parked in"}
	for i := 1; i < len(order); i++ {
		if strings.Index(body, order[i-1]) > strings.Index(body, order[i]) {
			t.Errorf("%q after %q: want oldest first", order[i-1], order[i])
		}
	}

	_, body = b.get(t, "/jobs/job-1?group="+url.QueryEscape(b.group))
	mustContain(t, "job-1 with its group", body, `<span class="src src-read">none</span>`, "idempotency.Key("+b.group+", "+b.topic+", ID)")

	code, body = b.get(t, "/jobs/nobody")
	if code != http.StatusNotFound {
		t.Errorf("an unknown job: %d", code)
	}
	mustContain(t, "unknown job", body, "not found anywhere", `id="not-found"`, "Postgres: outbox, produced jobs, claims", "Job log (joblog/pgjoblog)", "DLQ topics", b.dlq)
	if code, _ := b.get(t, "/jobs?q="); code != http.StatusBadRequest {
		t.Errorf("an empty search: %d", code)
	}
}

// Without a database the job page says so instead of leaving the source
// out, and shows what the DLQ topics know.
func TestJobPageWithoutDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.park(t, 0, 1)
	code, body := b.get(t, "/jobs/job-0")
	if code != http.StatusOK {
		t.Fatalf("job-0: %d\n%s", code, body)
	}
	mustContain(t, "job-0 without a database", body, "Postgres: outbox, produced jobs, claims", "Job log (joblog/pgjoblog)", "not configured",
		"the console was started without a database", "Parked in "+b.dlq)
	if n := strings.Count(body, ">not configured</span>"); n != 2 {
		t.Errorf("%d sources not configured, want 2 (Postgres, the job log)", n)
	}
}

// The job page reads each DLQ topic newest first, up to ScanLimit
// records of it: a job among them is shown; of one older the page says
// which records it searched and that older ones were not, rather than
// that the job is parked nowhere.
func TestJobPageScanLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, console.ScanLimit(2))
	mw, err := dlq.Middleware(b.cl, dlq.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	fail := handler.Chain(handler.Func(func(context.Context, *handler.Job) error { return handler.Permanent(errors.New("bad input")) }), mw)
	id := func(i int) string { return fmt.Sprintf("%s-%d", b.topic, i) } // IDs of this test's own, for a shared broker
	for i := range 4 {
		job := &handler.Job{Topic: b.topic, Offset: int64(i), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id(i))}}}
		if _, parked := handler.ParkedOf(fail.Handle(t.Context(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
	note := "searched the newest 2 records of " + b.dlq + "; older ones not searched"

	code, body := b.get(t, "/jobs/"+url.PathEscape(id(3)))
	if code != http.StatusOK {
		t.Fatalf("the newest job: %d\n%s", code, body)
	}
	mustContain(t, "the newest job", body, "Parked in "+b.dlq, `<span class="src src-partial">partial</span>`, `id="dlq-not-searched"`, note)

	code, body = b.get(t, "/jobs/"+url.PathEscape(id(0)))
	if code != http.StatusNotFound {
		t.Errorf("a job older than the scan limit: %d, want 404", code)
	}
	mustContain(t, "a job older than the scan limit", body, `id="not-found"`, `id="dlq-not-searched"`, note, "console.ScanLimit",
		`href="/dlq/`+b.dlq+`?id=`+url.QueryEscape(id(0))+`"`)
	mustNotContain(t, "a job older than the scan limit", body, "Parked in")
}

// The outbox page lists the scheduled jobs in due order, by topic and a
// page at a time, and the periodic schedules; with actions on, each job
// has a cancel button that withdraws it (CSRF-checked, logged with who).
func TestOutboxScheduled(t *testing.T) {
	t.Parallel()
	pool := jobsDB(t)
	b := setup(t)
	logs := b.serveLogged(t, nil, console.Outbox(pool), console.Actions())
	for i, id := range []string{"later-b", "later-a", "later-c"} {
		enqueueIn(t, pool, b.topic, id, time.Duration(i+1)*time.Hour)
	}
	enqueueIn(t, pool, "other-topic", "other-1", time.Hour)
	if _, err := pool.Exec(t.Context(), `INSERT INTO shareq_scheduler_state (app, schedule, spec, last_firing, next_firing, leader, updated_at)
		VALUES ('billing', 'nightly', '@daily', now() - interval '1 hour', now() + interval '23 hours', 'host/1', now())`); err != nil {
		t.Fatal(err)
	}
	_, body := b.get(t, "/outbox?topic="+url.QueryEscape(b.topic))
	mustContain(t, "outbox", body, `id="scheduled"`, "later-b", "later-a", "later-c", `href="/jobs/later-a"`, `action="/outbox/cancel"`,
		`id="schedules"`, "billing", "nightly", "@daily", "no active scheduler")
	mustNotContain(t, "outbox of one topic", body, "other-1")
	if strings.Index(body, "later-b") > strings.Index(body, "later-a") || strings.Index(body, "later-a") > strings.Index(body, "later-c") {
		t.Error("scheduled jobs not in due order")
	}

	code, body := b.post(t, "/outbox", "/outbox/cancel", url.Values{"id": {"later-a"}})
	if code != http.StatusOK {
		t.Fatalf("cancel: %d\n%s", code, body)
	}
	mustContain(t, "after the cancel", body, `id="cancel-result"`, "later-a</code>: withdrawn")
	if strings.Contains(body, `href="/jobs/later-a"`) {
		t.Error("later-a still listed after its cancel")
	}
	want := `msg="console: action" who="anonymous (loopback)" action=cancel outcome=done job_id=later-a result=withdrawn`
	if lines := actions(logs); len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("action log %q, want %q", lines, want)
	}
	if code, _ := b.post(t, "", "/outbox/cancel", url.Values{"id": {"later-b"}}); code != http.StatusForbidden {
		t.Errorf("cancel without a CSRF token: %d", code)
	}
}

// The scheduled jobs come a page at a time.
func TestOutboxScheduledPages(t *testing.T) {
	t.Parallel()
	pool := jobsDB(t)
	b := setup(t, console.Outbox(pool))
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+pgoutbox.Table+` (topic, value, job_id, due_at)
		SELECT 'pages', '\x00', 'page-' || lpad(i::text, 3, '0'), now() + i * interval '1 minute' FROM generate_series(1, 60) AS i`); err != nil {
		t.Fatal(err)
	}
	_, body := b.get(t, "/outbox")
	mustContain(t, "first page", body, "page-001", "page-050", `id="next-page"`)
	mustNotContain(t, "first page", body, "page-051")
	i := strings.Index(body, `href="/outbox?after=`)
	if i < 0 {
		t.Fatal("no next page link")
	}
	next := body[i+len(`href="`):]
	next = strings.ReplaceAll(next[:strings.Index(next, `"`)], "&amp;", "&")
	_, body = b.get(t, next)
	mustContain(t, "second page", body, "page-051", "page-060")
	mustNotContain(t, "second page", body, "page-050", `id="next-page"`)
}
