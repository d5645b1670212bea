package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// jobsDB is a migrated schema of the test's own and its -database URL.
func jobsDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return pool, pgtest.SchemaURL(t, schema)
}

// enqueueJob enqueues a job on topic with ID id in a transaction of its
// own.
func enqueueJob(t *testing.T, pool *pgxpool.Pool, topic, id, key string, opts ...pgoutbox.Option) pgoutbox.Result {
	t.Helper()
	var res pgoutbox.Result
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var eopts []enqueue.Option
		eopts = append(eopts, enqueue.ID(id))
		if key != "" {
			eopts = append(eopts, enqueue.Key([]byte(key)))
		}
		var err error
		res, err = pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob(topic, map[string]string{"id": id}, eopts...), opts...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// jobsRun runs "shareq jobs" with args and -database url.
func jobsRun(t *testing.T, url string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(t.Context(), append(append([]string{"jobs"}, args...), "-database", url), &out, &errOut)
	return out.String(), errOut.String(), err
}

// listed returns the job IDs of a list's table, in order, and checks that
// each column starts where its heading does.
func listed(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	head := lines[0]
	if !strings.HasPrefix(head, "JOB ID") {
		t.Fatalf("no heading: %q", out)
	}
	cols := regexp.MustCompile(`[A-Z]+( [A-Z]+)*`).FindAllStringIndex(head, -1)
	var ids []string
	for _, l := range lines[1:] {
		for _, c := range cols[1:] {
			if c[0] >= len(l) || l[c[0]-1] != ' ' || l[c[0]] == ' ' {
				t.Fatalf("column %q not aligned in\n%s", head[c[0]:c[1]], out)
			}
		}
		ids = append(ids, strings.Fields(l)[0])
	}
	return ids
}

// The list shows the jobs waiting in the outbox in due order, with due
// times readable and relative, attempts and the last error of a failing
// job, and unique keys; its filters select by topic, due time and state.
func TestJobsList(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	stdout, stderr, err := jobsRun(t, url, "list")
	if err != nil || !strings.Contains(stderr, "no jobs waiting in the outbox match") || len(listed(t, stdout)) != 0 {
		t.Fatalf("empty outbox: %v\n%s%s", err, stdout, stderr)
	}
	enqueueJob(t, pool, "reports", "nightly", "", pgoutbox.At(time.Now().Add(50*time.Hour)))
	enqueueJob(t, pool, "emails", "follow-up-1", "user-1", pgoutbox.In(time.Hour), pgoutbox.UniqueFor("follow-up/user-1", 24*time.Hour))
	enqueueJob(t, pool, "emails", "welcome-1", "user-1")
	enqueueJob(t, pool, "webhooks", "hook-1", "")
	if _, err := pool.Exec(t.Context(), `UPDATE `+pgoutbox.Table+` SET attempts = 3, last_error = 'UNKNOWN_TOPIC_OR_PARTITION: no such topic
details', next_attempt_at = now() + interval '30 seconds' WHERE job_id = 'hook-1'`); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err = jobsRun(t, url, "list")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs list:\n%s%s", stdout, stderr)
	if got, want := listed(t, stdout), []string{"welcome-1", "hook-1", "follow-up-1", "nightly"}; !slices.Equal(got, want) {
		t.Fatalf("listed %v, want %v (due order)", got, want)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`follow-up-1 +emails +user-1 +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(in (1h0m|59m\d+s)\) +0 +follow-up/user-1 +-`),
		regexp.MustCompile(`nightly +reports +- +\S+ \(in 2d2h\)`),
		regexp.MustCompile(`hook-1 +webhooks +- +\S+ \((now|\d+s ago)\) +3 \(next try in \d+s\) +- +UNKNOWN_TOPIC_OR_PARTITION: no such topic …`),
	} {
		if !want.MatchString(stdout) {
			t.Errorf("list does not match %s:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "4 jobs (2 not due yet)") {
		t.Errorf("summary: %q", stderr)
	}

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-topic", "emails"}, []string{"welcome-1", "follow-up-1"}},
		{[]string{"-scheduled"}, []string{"follow-up-1", "nightly"}},
		{[]string{"-failing"}, []string{"hook-1"}},
		{[]string{"-due-before", "2h"}, []string{"welcome-1", "hook-1", "follow-up-1"}},
		{[]string{"-due-after", "24h"}, []string{"nightly"}},
		{[]string{"-due-after", time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339), "-due-before", "3h"}, []string{"follow-up-1"}},
		{[]string{"-topic", "none"}, nil},
	} {
		stdout, stderr, err := jobsRun(t, url, append([]string{"list"}, c.args...)...)
		if err != nil {
			t.Fatalf("list %v: %v", c.args, err)
		}
		if got := listed(t, stdout); !slices.Equal(got, c.want) {
			t.Errorf("list %v: %v, want %v\n%s", c.args, got, c.want, stderr)
		}
	}

	stdout, _, err = jobsRun(t, url, "list", "-json", "-topic", "emails")
	if err != nil {
		t.Fatal(err)
	}
	var js []jsonOutboxRow
	if err := json.Unmarshal([]byte(stdout), &js); err != nil || len(js) != 2 {
		t.Fatalf("-json: %v, %d rows\n%s", err, len(js), stdout)
	}
	f := js[1]
	if f.JobID != "follow-up-1" || *f.Key != "user-1" || f.DueAt == nil || f.DueInSeconds < 3500 || f.DueInSeconds > 3600 || *f.UniqueKey != "follow-up/user-1" ||
		f.Attempts != 0 || f.LastError != nil || f.Value != nil || !slices.Contains(f.Headers, handler.JobIDHeader) {
		t.Fatalf("-json row: %+v", f)
	}
}

// Pages follow each other with the cursor the previous one printed, also
// over jobs due at the same time and jobs from before migration 0003.
func TestJobsListPages(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	at := time.Now().Add(time.Hour)
	var want []string
	for i := range 7 {
		id := "job-" + string(rune('a'+i))
		enqueueJob(t, pool, "jobs", id, "", pgoutbox.At(at)) // all due at once: id order
		want = append(want, id)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE `+pgoutbox.Table+` SET due_at = '-infinity' WHERE job_id = 'job-g'`); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"job-g"}, want[:6]...)
	var got []string
	args := []string{"list", "-limit", "3"}
	for page := 0; ; page++ {
		stdout, stderr, err := jobsRun(t, url, args...)
		if err != nil {
			t.Fatal(err)
		}
		ids := listed(t, stdout)
		got = append(got, ids...)
		if page == 0 && !strings.Contains(stdout, "due (enqueued before migration 0003)") {
			t.Errorf("a row from before 0003:\n%s", stdout)
		}
		m := regexp.MustCompile(`next page with -after (\S+)`).FindStringSubmatch(stderr)
		if m == nil {
			if len(ids) == 0 && !strings.Contains(stderr, "no more jobs match") {
				t.Errorf("last page: %q", stderr)
			}
			break
		}
		if len(ids) != 3 || page > 3 {
			t.Fatalf("page %d: %v, %s", page, ids, stderr)
		}
		args = []string{"list", "-limit", "3", "-after", m[1]}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages: %v, want %v", got, want)
	}
}

func TestJobsBadUsage(t *testing.T) {
	t.Parallel()
	_, url := jobsDB(t)
	for _, c := range []struct {
		args  []string
		usage bool   // errUsage: exit status 2
		want  string // in the error or on stderr
	}{
		{[]string{}, true, "commands:"},
		{[]string{"nope"}, true, `unknown command "nope"`},
		{[]string{"list", "extra"}, true, "want 0 argument(s)"},
		{[]string{"cancel"}, true, "want 1 argument(s)"},
		{[]string{"list", "-limit", "0"}, false, "-limit 0"},
		{[]string{"list", "-limit", "10001"}, false, "-limit 10001"},
		{[]string{"list", "-due-before", "tomorrow"}, false, `"tomorrow": want a time`},
		{[]string{"list", "-after", "42"}, false, "not a cursor"},
		{[]string{"list", "-nope"}, false, "flag provided but not defined"},
		{[]string{"cancel", "x", "-group", "g"}, false, "-group and -topic go together"},
		{[]string{"cancel", "x", "-group", "g", "-topic", "t", "-claim-key", "k"}, false, "not both"},
		{[]string{"show", "x", "-preview", "-1"}, false, "must not be negative"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"jobs"}, c.args...)
		if len(c.args) > 0 {
			args = append(args, "-database", url)
		}
		err := run(t.Context(), args, &out, &errOut)
		if err == nil || errors.Is(err, errUsage) != c.usage || !strings.Contains(err.Error()+errOut.String(), c.want) {
			t.Errorf("jobs %v: %v (usage %v)\n%s; want %q", c.args, err, errors.Is(err, errUsage), errOut.String(), c.want)
		}
	}
}

func TestJobsNeedDatabase(t *testing.T) {
	t.Setenv(databaseEnv, "")
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"jobs", "list"}, &out, &errOut); !errors.Is(err, errUsage) || !strings.Contains(errOut.String(), "-database") {
		t.Fatalf("list without -database: %v %s", err, errOut.String())
	}
}

func TestJobsWithoutMigrations(t *testing.T) {
	t.Parallel()
	_, schema := pgtest.NewPool(t, 1)
	url := pgtest.SchemaURL(t, schema)
	for _, cmd := range [][]string{{"list"}, {"schedules"}, {"cancel", "x"}, {"show", "x"}} {
		if _, _, err := jobsRun(t, url, cmd...); err == nil || !strings.Contains(err.Error(), "migrations") {
			t.Errorf("jobs %v without the tables: %v, want advice to run the migrations", cmd, err)
		}
	}
}

// A job cancelled before the relay produced it is withdrawn; after, it is
// reported produced without a claim key, and stopped with one; a run
// already claimed is too late; an unknown ID says so. Each cancel that
// did not cancel fails (exit status 1).
func TestJobsCancel(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	enqueueJob(t, pool, "jobs", "later", "", pgoutbox.In(time.Hour), pgoutbox.Unique("once"))
	stdout, _, err := jobsRun(t, url, "cancel", "later")
	if err != nil || !strings.Contains(stdout, "job later withdrawn from the outbox: it will not reach Kafka") {
		t.Fatalf("cancel before the relay: %v\n%s", err, stdout)
	}
	if res := enqueueJob(t, pool, "jobs", "later-2", "", pgoutbox.Unique("once")); res.Duplicate {
		t.Fatal("the withdrawn job's unique key is still taken")
	}
	if _, _, err := jobsRun(t, url, "cancel", "later"); err == nil || !strings.HasPrefix(err.Error(), "unknown: job later is unknown") {
		t.Fatalf("second cancel: %v", err)
	}

	// The relay produces two jobs.
	enqueueJob(t, pool, "jobs", "ran", "")
	brokers, cl := jobsCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut logbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"relay", "-database", url, "-brokers", brokers}, &out, &errOut)
	}()
	readOne(t, cl)
	deadline := time.Now().Add(30 * time.Second)
	for produced := 0; produced < 2; { // the produced rows commit after the broker's acknowledgement
		if time.Now().After(deadline) {
			t.Fatalf("the relay produced %d jobs, want 2 (%s)", produced, errOut.String())
		}
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgoutbox.ProducedTable).Scan(&produced); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v (%s)", err, errOut.String())
	}

	if _, _, err := jobsRun(t, url, "cancel", "later-2"); err == nil || !strings.Contains(err.Error(), "was already produced and nothing was recorded") {
		t.Fatalf("cancel of a produced job without a claim key: %v", err)
	}
	key := idempotency.Key("workers", "jobs", "later-2")
	for range 2 { // a second cancel finds it stopped too
		stdout, _, err = jobsRun(t, url, "cancel", "later-2", "-group", "workers", "-topic", "jobs")
		if err != nil || !strings.Contains(stdout, "marked cancelled") || !strings.Contains(stdout, key) {
			t.Fatalf("cancel of a produced job with its claim key: %v\n%s", err, stdout)
		}
	}
	var cancelled bool
	if err := pool.QueryRow(t.Context(), "SELECT cancelled_at IS NOT NULL FROM shareq_processed_jobs WHERE key = $1", key).Scan(&cancelled); err != nil || !cancelled {
		t.Fatalf("claim row of the stopped job: %v, %v", cancelled, err)
	}
	// A worker claimed "ran" and committed its run.
	if _, err := pool.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key) VALUES ('my-key')"); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = jobsRun(t, url, "cancel", "ran", "-claim-key", "my-key", "-json")
	var res struct {
		JobID    string `json:"job_id"`
		Result   string `json:"result"`
		ClaimKey string `json:"claim_key"`
	}
	if jerr := json.Unmarshal([]byte(stdout), &res); jerr != nil || err == nil || res.JobID != "ran" || res.Result != "too-late" || res.ClaimKey != "my-key" || !strings.Contains(err.Error(), "already produced and run") {
		t.Fatalf("cancel of a job that ran: %v, %+v (%v)", err, res, jerr)
	}
}

// show prints a job's rows in the outbox, with value and unique key, or
// that the relay produced it.
func TestJobsShow(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	enqueueJob(t, pool, "emails", "follow-up-1", "user-1", pgoutbox.In(time.Hour), pgoutbox.UniqueFor("follow-up/user-1", 24*time.Hour))
	stdout, _, err := jobsRun(t, url, "show", "follow-up-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs show:\n%s", stdout)
	for _, want := range []string{
		"job id       follow-up-1\n", "produced     no\n", "  topic      emails\n", "  key        (6 bytes) user-1\n",
		"  unique     follow-up/user-1, and for 24h0m0s after the relay produces it\n", `{"id":"follow-up-1"}`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("show lacks %q", want)
		}
	}
	if !regexp.MustCompile(`  due        \S+Z \(in (1h0m|59m\d+s)\)`).MatchString(stdout) {
		t.Errorf("show's due time:\n%s", stdout)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+pgoutbox.ProducedTable+" (job_id, produced_at) VALUES ('gone', now() - interval '2 minutes')"); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = jobsRun(t, url, "show", "gone")
	if err != nil || !regexp.MustCompile(`produced     \S+ \(2m0s ago\) by a relay: in Kafka`).MatchString(stdout) || !strings.Contains(stdout, "outbox       not in it") {
		t.Fatalf("show of a produced job: %v\n%s", err, stdout)
	}
	if _, _, err := jobsRun(t, url, "show", "nope"); err == nil || !strings.Contains(err.Error(), "not in the outbox") {
		t.Fatalf("show of an unknown job: %v", err)
	}
	stdout, _, err = jobsRun(t, url, "show", "follow-up-1", "-json")
	var js struct {
		JobID  string          `json:"job_id"`
		Outbox []jsonOutboxRow `json:"outbox"`
		Claim  string          `json:"claim"`
		Cancel string          `json:"cancel"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || len(js.Outbox) != 1 || *js.Outbox[0].Value != `{"id":"follow-up-1"}` || js.Outbox[0].UniqueFor != "24h0m0s" ||
		js.Claim != "unknown" || js.Cancel != "withdraw" {
		t.Fatalf("show -json: %v\n%s", err, stdout)
	}
}

// show says whether a job ran, once its claim key is given, and offers a
// cancel only where one can still work; of a job Postgres holds nothing
// of, it says what that can have been (issue 29 item 8).
func TestJobsShowRunAndCancel(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	produced := func(id string) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), "INSERT INTO "+pgoutbox.ProducedTable+" (job_id, produced_at) VALUES ($1, now() - interval '2 minutes')", id); err != nil {
			t.Fatal(err)
		}
	}
	show := func(args ...string) string {
		t.Helper()
		stdout, _, err := jobsRun(t, url, append([]string{"show"}, args...)...)
		if err != nil {
			t.Fatalf("show %v: %v", args, err)
		}
		return stdout
	}
	lines := func(what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(out) {
				t.Errorf("%s: no line %q in\n%s", what, w, out)
			}
		}
	}

	// Waiting in the outbox: a cancel withdraws it.
	enqueueJob(t, pool, "emails", "waiting", "", pgoutbox.In(time.Hour))
	lines("waiting", show("waiting"),
		`produced     no`,
		`cancel       'shareq jobs cancel waiting' withdraws it from the outbox: it never reaches Kafka`)

	// Produced, its claim not read: whether it ran is unknown, and so is
	// whether a cancel can work.
	produced("sent")
	lines("produced", show("sent"),
		`run          unknown: only its idempotency claim says; give -group and -topic \(or -claim-key\) to read it`,
		`cancel       possible only if no worker ran it yet: 'shareq jobs show sent -group GROUP -topic TOPIC' reads its claim and says`)

	// Produced, no claim yet: a cancel stops it.
	key := idempotency.Key("mailers", "emails", "sent")
	lines("produced, not run", show("sent", "-group", "mailers", "-topic", "emails"),
		`run          not yet: no claim under "`+regexp.QuoteMeta(key)+`"`,
		`cancel       'shareq jobs cancel sent -group mailers -topic emails' stops it: a worker claiming with idempotency.Middleware on pgstore accepts it without running it`)

	// Produced and run: no cancel offered.
	if _, err := pool.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key, claimed_at) VALUES ($1, now() - interval '1 minute')", key); err != nil {
		t.Fatal(err)
	}
	out := show("sent", "-group", "mailers", "-topic", "emails")
	lines("produced and run", out,
		`run          yes: a run committed its claim "`+regexp.QuoteMeta(key)+`" at \S+ \(1m0s ago\)`,
		`cancel       too late: it ran`)
	if strings.Contains(out, "jobs cancel") {
		t.Errorf("show of a job that ran offers a cancel:\n%s", out)
	}
	var js struct {
		ClaimKey string     `json:"claim_key"`
		Claim    string     `json:"claim"`
		ClaimAt  *time.Time `json:"claim_at"`
		Cancel   string     `json:"cancel"`
	}
	stdout, _, err := jobsRun(t, url, "show", "sent", "-claim-key", key, "-json")
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || js.ClaimKey != key || js.Claim != "ran" || js.ClaimAt == nil || js.Cancel != "too-late" {
		t.Errorf("show -json of a job that ran: %v\n%s", err, stdout)
	}

	// Produced and cancelled: done already.
	produced("stopped")
	if _, _, err := jobsRun(t, url, "cancel", "stopped", "-group", "mailers", "-topic", "emails"); err != nil {
		t.Fatal(err)
	}
	lines("cancelled", show("stopped", "-group", "mailers", "-topic", "emails"),
		`run          no: cancelled at .* claim "`+regexp.QuoteMeta(idempotency.Key("mailers", "emails", "stopped"))+`"; a worker claiming with idempotency.Middleware on pgstore accepts it without running it`,
		`cancel       done already`)

	// Withdrawn: Postgres holds nothing of it any more; the error says
	// what it can have been, and offers no cancel.
	enqueueJob(t, pool, "emails", "withdrawn", "", pgoutbox.In(time.Hour))
	if _, _, err := jobsRun(t, url, "cancel", "withdrawn"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"withdrawn"}, {"withdrawn", "-group", "mailers", "-topic", "emails"}} {
		_, _, err := jobsRun(t, url, append([]string{"show"}, args...)...)
		if err == nil {
			t.Fatalf("show %v of a withdrawn job: no error", args)
		}
		msg := err.Error()
		for _, want := range []string{
			"job withdrawn: not in the outbox, and not produced by a relay within its ProducedRetention",
			". Postgres holds nothing else of it, so it was one of:\n",
			"\n  withdrawn        cancelled (shareq jobs cancel, pgoutbox.Cancel) before a relay produced it: it never reached Kafka\n",
			"\n  never enqueued   a wrong ID, or its transaction rolled back (or has not committed yet)\n",
			"\n  produced earlier longer ago than the relay's ProducedRetention: it went to Kafka\n",
			"\nThere is nothing left to cancel.",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("show %v: error lacks %q:\n%s", args, want, msg)
			}
		}
		if len(args) > 1 && !strings.Contains(msg, `; its claim "`+idempotency.Key("mailers", "emails", "withdrawn")+`" holds no run.`) {
			t.Errorf("show %v: error does not say the claim holds nothing:\n%s", args, msg)
		}
	}
}

// A tab in a job ID cannot start a column, and an empty key shows as "".
func TestJobsListCells(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := pgoutbox.EnqueueJobTx(t.Context(), tx, enqueue.NewJob("jobs", 1, enqueue.ID("a\tb"), enqueue.Key([]byte{})), pgoutbox.In(time.Hour))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stdout, _, err := jobsRun(t, url, "list")
	if err != nil {
		t.Fatal(err)
	}
	listed(t, stdout)
	if !regexp.MustCompile(`\na b +jobs +"" +\S+Z \(in`).MatchString(stdout) {
		t.Fatalf("list:\n%s", stdout)
	}
}
