package consolebrowser_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/joblog/pgjoblog"
	"github.com/shareq/shareq/scheduler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// TestJobLifeInBrowser follows one job through its whole life: enqueued
// in the Postgres outbox, produced by a relay, run by a worker whose
// dependency times out (retried) and whose bug then fails it and parks it,
// replayed from the console once the bug is fixed, and run to success. An
// operator then pastes its ID into the search box of the overview page and
// sees, in order, the enqueue, the produce, the two failed runs, the
// parking and the replay, the last run succeeded. The
// outbox page lists jobs for later, the periodic schedules with the
// active scheduler, and a cancel button per job.
func TestJobLifeInBrowser(t *testing.T) {
	chromium := browser(t)
	pool := migratedPool(t)
	c := kafkatest.New(t)
	shots := os.Getenv(envScreenshots)
	topic, group := topicAndGroup(t, c, shots, "invoices", "billing", 1)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(t, dlqTopic, 1)
	cl := c.Client(t)
	const id = "invoice-42"

	// Enqueued in the outbox, produced by a relay.
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueTx(t.Context(), tx, topic, map[string]int{"invoice": 42}, enqueue.ID(id))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := pgoutbox.NewRelay(pool, c.Client(t, enqueue.ProducerOpts()...), pgoutbox.PollInterval(50*time.Millisecond), pgoutbox.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	stopRelay := kafkatest.Run(t, relay.Run)
	defer stopRelay()

	// A worker with the job log, whose handler has a bug until fixed.
	jl, err := pgjoblog.New(pool, pgjoblog.FlushEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stopLog := kafkatest.Run(t, jl.Run)
	defer stopLog()
	fixed := make(chan struct{})
	h := handler.JSON(func(_ context.Context, job *handler.Job, inv map[string]int) error {
		select {
		case <-fixed:
			return nil
		default:
		}
		if job.DeliveryCount == 1 {
			return errors.New("vat service: timeout") // retried
		}
		return handler.Permanent(errors.New("render invoice 42: template: missing field \"vat_id\""))
	})
	park, err := dlq.Middleware(cl, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	obs := new(shareqtest.Observer)
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, h), worker.Use(park),
		worker.RetryBackoff(func(int32) time.Duration { return 10 * time.Millisecond }),
		worker.Observers(obs, jl), worker.Logger(slog.New(slog.DiscardHandler)), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	defer stop()
	outcomeOf := func(o worker.Outcome) func([]shareqtest.Event) bool {
		return func(es []shareqtest.Event) bool {
			return slices.ContainsFunc(es, func(e shareqtest.Event) bool { return e.ID == id && e.Result.Outcome == o })
		}
	}
	obs.WaitFor(t, 60*time.Second, "the job parked", outcomeOf(worker.OutcomeParked))
	close(fixed)

	h2, err := console.New(console.Client(cl), console.Outbox(pool), console.Actions(), console.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h2)
	defer srv.Close()
	ctx := startBrowser(t, chromium, 1000, 900)
	do, text := tab{t, ctx}.do, tab{t, ctx}.text

	// Replayed from its DLQ record's page, and run to success.
	do(chromedp.Navigate(srv.URL+"/dlq/"+dlqTopic+"/0/0"), chromedp.WaitVisible(chromedp.ID("replay-one")),
		chromedp.Click(chromedp.ID("replay-one")), chromedp.WaitVisible(chromedp.ID("replay-done")))
	obs.WaitFor(t, 60*time.Second, "the replayed job succeeded", outcomeOf(worker.OutcomeSucceeded))
	waitRuns(t, pool, id, 3)

	// Found from the overview's search box.
	do(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`input[name=q]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name=q]`), id),
		chromedp.Submit(chromedp.CSS(`input[name=q]`)),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		screenshot(shots, "job-timeline"))
	kinds, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#timeline li")).map(li => li.dataset.kind)`))
	if err != nil {
		t.Fatal(err)
	}
	timeline := text("#timeline")
	t.Logf("timeline %v:\n%s", kinds, timeline)
	slices.Sort(kinds)
	if want := []string{"enqueued", "parked", "produced", "replayed", "run", "run", "run"}; !slices.Equal(kinds, want) {
		t.Errorf("timeline events %v, want %v", kinds, want)
	}
	order := []string{"Enqueued for " + topic, "Produced to Kafka by a relay", "Run, delivery 1: retried", "Run, delivery 2: parked", "Parked in " + dlqTopic, "Replayed to " + topic}
	at := -1
	for _, o := range order {
		i := strings.Index(timeline, o)
		if i <= at {
			t.Errorf("%q missing or out of order (oldest first): want %q", o, order)
		}
		at = i
	}
	if i := strings.Index(timeline, "Run, delivery 1: succeeded"); i < strings.Index(timeline, "Parked in") {
		t.Errorf("the succeeded run missing or before the parking")
	}
	if !strings.Contains(timeline, `missing field "vat_id"`) || !strings.Contains(timeline, "ack accept") || strings.Contains(text("#sources"), "failed") {
		t.Errorf("timeline without the run's error, or a source failed: %s", text("#sources"))
	}

	// Jobs for later and the schedules on the outbox page.
	for i, later := range []string{"invoice-43", "reminder-7", "invoice-44"} {
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			_, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, map[string]int{"n": i}, enqueue.ID(later)),
				pgoutbox.In(time.Duration(i+1)*3*time.Hour), pgoutbox.Unique("due/"+later))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	holdSchedulerLock(t, pool, "billing")
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+scheduler.StateTable+` (app, schedule, spec, last_firing, next_firing, leader, updated_at) VALUES
		('billing', 'dunning', '0 9 * * *', now() - interval '5 hours', now() + interval '19 hours', 'billing-7f9c/4211', now()),
		('billing', 'month-end', '@monthly', now() - interval '4 days', now() + interval '26 days', 'billing-7f9c/4211', now())`); err != nil {
		t.Fatal(err)
	}
	do(chromedp.Navigate(srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.ID("schedules")), screenshot(shots, "outbox-scheduled"))
	if s := text("#scheduled"); !strings.Contains(s, "invoice-43") || !strings.Contains(s, "reminder-7") || strings.Index(s, "invoice-43") > strings.Index(s, "invoice-44") {
		t.Errorf("scheduled jobs: %s", s)
	}
	if s := text("#schedules"); !strings.Contains(s, "dunning") || !strings.Contains(s, "yes") {
		t.Errorf("schedules, with the active scheduler: %s", s)
	}
	do(chromedp.Click(chromedp.CSS(`button[aria-label="Cancel job reminder-7"]`)), chromedp.WaitVisible(chromedp.ID("cancel-result")))
	if r := text("#cancel-result"); !strings.Contains(r, "reminder-7: withdrawn") || strings.Contains(text("#scheduled"), "reminder-7") {
		t.Errorf("after the cancel: %q", r)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// waitRuns waits until the job log holds n runs of job id.
func waitRuns(t *testing.T, pool *pgxpool.Pool, id string, n int) {
	t.Helper()
	l, err := pgjoblog.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		runs, err := l.Runs(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job log holds %d runs of %s, want %d", len(runs), id, n)
		}
	}
}

// holdSchedulerLock holds app's scheduler lock on a connection of its
// own until t ends, as an active scheduler does.
func holdSchedulerLock(t *testing.T, pool *pgxpool.Pool, app string) {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, scheduler.LockKey(app)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, scheduler.LockKey(app))
	})
}
