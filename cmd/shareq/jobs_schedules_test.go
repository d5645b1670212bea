package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/scheduler"
)

// schedules lists the schedules the active scheduler recorded, with the
// next firing and the leader while one is active, and says when none is.
func TestJobsSchedules(t *testing.T) {
	t.Parallel()
	pool, url := jobsDB(t)
	stdout, stderr, err := jobsRun(t, url, "schedules")
	if err != nil || !strings.Contains(stderr, "no schedules recorded") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("no schedules: %v\n%s%s", err, stdout, stderr)
	}
	var app string // the advisory lock is the database's: an app of the test's own
	if err := pool.QueryRow(t.Context(), "SELECT 'cli-' || current_schema()").Scan(&app); err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(pool, scheduler.App(app), scheduler.Logger(slog.New(slog.DiscardHandler)),
		scheduler.RetryInterval(50*time.Millisecond), scheduler.CheckInterval(50*time.Millisecond),
		scheduler.Add(
			scheduler.Schedule{Name: "tick", Spec: scheduler.Every(100 * time.Millisecond), Topic: "ticks", Value: 1},
			scheduler.Schedule{Name: "nightly", Spec: scheduler.MustParseCron("0 3 * * *"), Topic: "reports", Value: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("scheduler: %v", err)
			}
		}
	}
	defer stop()
	deadline := time.Now().Add(30 * time.Second)
	for s.Stats().Schedules[0].Enqueued == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the scheduler fired nothing")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}

	stdout, _, err = jobsRun(t, url, "schedules", "-app", app)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("jobs schedules, active:\n%s", stdout)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "APP") {
		t.Fatalf("schedules:\n%s", stdout)
	}
	leader := regexp.QuoteMeta(s.Stats().App) // the app, then what the scheduler recorded
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^` + leader + ` +nightly +0 3 \* \* \* +never +\d{4}-\d\d-\d\dT03:00:00Z \(in \S+\) +yes +\S+/\d+$`),
		regexp.MustCompile(`^` + leader + ` +tick +every 100ms +\S+Z \((now|\d+s ago)\) +\S+Z \((now|in \d+s)\) +yes +\S+/\d+$`),
	} {
		if !want.MatchString(lines[1]) && !want.MatchString(lines[2]) {
			t.Errorf("no line matches %s:\n%s", want, stdout)
		}
	}
	if i := strings.Index(lines[0], "NEXT FIRING"); lines[1][i-1] != ' ' || lines[1][i] == ' ' || lines[2][i] == ' ' {
		t.Errorf("columns not aligned:\n%s", stdout)
	}

	// A schedule an earlier leader recorded and the active one does not
	// run (removed from the app).
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+scheduler.StateTable+` (app, schedule, spec, last_firing, next_firing, leader, updated_at)
		VALUES ($1, 'removed', 'every 1h0m0s', now() - interval '2 hours', now() - interval '1 hour', 'old-host/1', now() - interval '2 hours')`, app); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = jobsRun(t, url, "schedules", "-app", app)
	if err != nil || !regexp.MustCompile(`(?m)^`+leader+` +removed +every 1h0m0s +\S+Z \(2h0m ago\) +- \(the active scheduler does not run it\) +not run +old-host/1$`).MatchString(stdout) ||
		strings.Count(stdout, " yes ") != 2 {
		t.Fatalf("a schedule the active scheduler does not run: %v\n%s", err, stdout)
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM `+scheduler.StateTable+` WHERE app = $1 AND schedule = 'removed'`, app); err != nil {
		t.Fatal(err)
	}

	stop()
	stdout, _, err = jobsRun(t, url, "schedules", "-app", app, "-json")
	if err != nil {
		t.Fatal(err)
	}
	var js []scheduleRow
	if err := json.Unmarshal([]byte(stdout), &js); err != nil || len(js) != 2 {
		t.Fatalf("-json: %v\n%s", err, stdout)
	}
	for _, r := range js {
		if r.App != app || r.Active || r.NextFiring != nil || r.Spec == nil || r.Leader == nil || !strings.Contains(*r.Leader, "/") {
			t.Errorf("after the scheduler stopped: %+v", r)
		}
		if (r.Schedule == "tick") != (r.LastFiring != nil) {
			t.Errorf("%s: last firing %v", r.Schedule, r.LastFiring)
		}
	}
	stdout, _, err = jobsRun(t, url, "schedules", "-app", app)
	if err != nil || strings.Count(stdout, "- (no active scheduler)") != 2 || !regexp.MustCompile(`tick .* no +\S+/\d+\n`).MatchString(stdout) {
		t.Fatalf("schedules without an active scheduler: %v\n%s", err, stdout)
	}
}
