package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/devbroker"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations/pgtest"
)

// runJSON runs the program with cfg (and -json) and returns its summary.
func runJSON(t *testing.T, cfg config) Summary {
	t.Helper()
	cfg.JSON = true
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	err := run(ctx, cfg, &stdout, &stderr)
	t.Logf("run took %v; stderr:\n%s", time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s", err, stdout.String())
	}
	var s Summary
	if err := json.Unmarshal([]byte(stdout.String()), &s); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, stdout.String())
	}
	return s
}

// testConfig is the default configuration, scaled down for tests.
func testConfig(t *testing.T, jobs int) config {
	return config{
		Jobs:        jobs,
		JobsSet:     true,
		ImageSize:   160, // small images: the race detector slows image work tenfold
		Concurrency: 8,
		Out:         t.TempDir(),
		SlowDelay:   300 * time.Millisecond,
		Timeout:     2 * time.Minute,
	}
}

// checkSummary checks the figures of a run of n jobs of the demo's plan
// (one corrupt, one flaky, the rest good) against each other.
func checkSummary(t *testing.T, s Summary, n int) {
	t.Helper()
	good := n - 1
	if s.Incomplete || s.Finished != n || s.Expected != n {
		t.Errorf("finished %d of %d (expected %d, incomplete %v: %s)", s.Finished, n, s.Expected, s.Incomplete, s.StopReason)
	}
	if s.Done != good {
		t.Errorf("done %d, want %d", s.Done, good)
	}
	// The corrupt image: parked at once in the DLQ with reason decode.
	if s.Parked[handler.ReasonDecode] != 1 || len(s.Parked) != 1 || len(s.Rejected) != 0 || len(s.Archived) != 0 {
		t.Errorf("parked %v, rejected %v, archived %v; want only the corrupt job parked with reason decode", s.Parked, s.Rejected, s.Archived)
	}
	// The flaky job: released once, done on its second delivery.
	if s.Released != 1 || s.Retried != 1 {
		t.Errorf("released %d, retried %d; want the flaky job's one release", s.Released, s.Retried)
	}
	// Every good job ran to completion exactly once.
	if s.HandlerRuns != int64(good) || s.Images != good || len(s.SavedTwice) != 0 || s.Duplicates != 0 {
		t.Errorf("handler runs %d, images %d, saved twice %v, duplicates %d; want %d, %d, none, 0",
			s.HandlerRuns, s.Images, s.SavedTwice, s.Duplicates, good, good)
	}
	if s.Thumbnails != good*len(thumbnailSizes) {
		t.Errorf("thumbnails %d, want %d", s.Thumbnails, good*len(thumbnailSizes))
	}
	if s.Elapsed <= 0 && s.ElapsedSeconds <= 0 || s.Throughput <= 0 || s.SlowestJob == "" {
		t.Errorf("elapsed %vs, throughput %v, slowest %q: want them set", s.ElapsedSeconds, s.Throughput, s.SlowestJob)
	}
	if len(s.Slow) > 0 && s.SlowestSeconds < s.SlowDelaySeconds {
		t.Errorf("slowest job took %vs, less than the slow jobs' %vs", s.SlowestSeconds, s.SlowDelaySeconds)
	}
}

// The whole demo on the embedded broker: every job gets one outcome, the
// good ones run once, the corrupt one is parked, the slow one keeps its
// lock.
func TestRunEmbedded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 30)
	// The embedded broker locks records for 5 s: a 3-s job has its lock
	// renewed once, at half the lock.
	cfg.SlowDelay = 3 * time.Second
	s := runJSON(t, cfg)
	if !s.Embedded || s.Produced != 30 || s.Store != "memory" || s.DLQTopic != dlqTopic {
		t.Errorf("embedded %v, produced %d, store %q, dlq %q", s.Embedded, s.Produced, s.Store, s.DLQTopic)
	}
	checkSummary(t, s, 30)
	if len(s.Slow) != 1 {
		t.Errorf("slow jobs %v, want one", s.Slow)
	}
	if s.Renewals < 1 || s.RenewalsFailed != 0 {
		t.Errorf("lock renewals %d, failed %d; want the slow job's lock renewed", s.Renewals, s.RenewalsFailed)
	}
	files, err := filepath.Glob(filepath.Join(cfg.Out, "img-*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != s.Thumbnails {
		t.Errorf("%d files in -out, summary says %d thumbnails", len(files), s.Thumbnails)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(cfg.Out, ".tmp-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// The text summary, with thumbnails kept in memory.
func TestRunText(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 10)
	cfg.Out = ""
	cfg.ConsoleAddr = "127.0.0.1:0"
	var stdout, stderr logbuf.Buffer
	if err := run(t.Context(), cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"thumbnails: 10 jobs in ",
		"done             9 (1 needed more than one delivery)",
		"parked           1 in thumbnails.dlq (decode: 1)",
		"saved            27 thumbnails of 9 images", // 3 sizes of each of the 9 good images
		"kept in memory",
		"slowest job",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "started an in-process Kafka broker") {
		t.Errorf("stderr lacks the broker line:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "web console at http://127.0.0.1:") {
		t.Errorf("stderr lacks the console's address:\n%s", stderr.String())
	}
}

// -produce-only and -work-only, as docker compose runs them, against one
// broker: the worker stops after -jobs outcomes.
func TestRunProduceThenWork(t *testing.T) {
	t.Parallel()
	c, err := devbroker.Start(0, partitions)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	produce := testConfig(t, 20)
	produce.Brokers, produce.ProduceOnly = c.ListenAddrs(), true
	p := runJSON(t, produce)
	if p.Produced != 20 || p.Finished != 0 {
		t.Fatalf("produce-only: produced %d, finished %d", p.Produced, p.Finished)
	}

	work := testConfig(t, 20)
	work.Brokers, work.WorkOnly = c.ListenAddrs(), true
	s := runJSON(t, work)
	if s.Produced != 0 || s.Embedded {
		t.Errorf("work-only: produced %d, embedded %v", s.Produced, s.Embedded)
	}
	checkSummary(t, s, 20)
}

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-jobs", "10", "-out="}, true},
		{[]string{"-brokers", "a:9092,b:9092", "-work-only"}, true},
		{[]string{"-produce-only"}, false},
		{[]string{"-work-only"}, false},
		{[]string{"-brokers", "a:9092", "-work-only", "-produce-only"}, false},
		{[]string{"-concurrency", "0"}, false},
		{[]string{"-jobs", "-1"}, false},
		{[]string{"extra"}, false},
		{[]string{"-stay=false"}, true},
	} {
		cfg, err := parseFlags(tc.args, &bytes.Buffer{})
		if (err == nil) != tc.ok {
			t.Errorf("%q: err = %v, want ok %v", tc.args, err, tc.ok)
		}
		if len(tc.args) == 0 && (!cfg.OutTemp || cfg.JobsSet || cfg.Jobs != 300 || !cfg.Stay) {
			t.Errorf("defaults: %+v", cfg)
		}
		if len(tc.args) > 0 && tc.args[0] == "-stay=false" && cfg.Stay {
			t.Errorf("-stay=false: Stay %v", cfg.Stay)
		}
		if len(tc.args) > 0 && tc.args[0] == "-jobs" && tc.ok && (cfg.OutTemp || cfg.Out != "" || !cfg.JobsSet) {
			t.Errorf("%q: OutTemp %v, Out %q, JobsSet %v", tc.args, cfg.OutTemp, cfg.Out, cfg.JobsSet)
		}
	}
}

// With -database the claims and a row per thumbnail go to Postgres, in
// one transaction per job. Needs SHAREQ_TEST_DATABASE_URL; runs in a
// schema of its own.
func TestRunDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t)

	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	cfg := testConfig(t, 20)
	cfg.DatabaseURL = url + sep + "search_path=" + schema
	s := runJSON(t, cfg)
	if s.Store != "postgres" {
		t.Errorf("store %q, want postgres", s.Store)
	}
	checkSummary(t, s, 20)
	if s.DBRows != 19*len(thumbnailSizes) || s.DBJobs != 19 {
		t.Errorf("database: %d rows for %d jobs, want %d for 19", s.DBRows, s.DBJobs, 19*len(thumbnailSizes))
	}
}

// With -stay (the default of the command) the demo prints its summary,
// which says where the web console is, and keeps the console, its worker
// and its broker up until interrupted: a newcomer who opens the console
// after reading the summary finds it (issue 29 item 6).
func TestRunStaysUpForTheConsole(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 10)
	cfg.Out, cfg.ConsoleAddr, cfg.Stay = "", "127.0.0.1:0", true
	ctx, interrupt := context.WithCancel(t.Context())
	defer interrupt()
	var stdout, stderr logbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &stdout, &stderr) }()

	// The summary, then the console's address.
	addr := regexp.MustCompile(`(?m)^  web console      (http://127\.0\.0\.1:\d+/) \(the share group thumbnails and its lag, the job parked in thumbnails\.dlq\)$`)
	var url string
	for deadline := time.Now().Add(2 * time.Minute); url == ""; time.Sleep(50 * time.Millisecond) {
		if m := addr.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before it was interrupted: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console address in the summary after 2m:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	}
	for _, want := range []string{
		"thumbnails: 10 jobs in ",
		"  still running    the worker and the in-process broker, for the console; Ctrl-C to stop\n",
		"  also try         go run ./cmd/shareq status thumbnails -brokers 127.0.0.1:",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout.String())
		}
	}

	// The console answers after the summary: the group with its member
	// (the worker still runs) and its lag, and the parked job.
	client := &http.Client{Timeout: 30 * time.Second}
	for path, want := range map[string]string{
		"groups/" + group: `<div><dt>Members</dt><dd>1</dd></div>`,
		"dlq/" + dlqTopic: "decode",
	} {
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s after the summary: %v", url+path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", url+path, resp.StatusCode, want, body)
		}
	}

	// Ctrl-C: run stops the worker, the console and the broker, and
	// returns without an error.
	interrupt()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after the interrupt: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return within 1m of the interrupt")
	}
	if _, err := client.Get(url); err == nil {
		t.Errorf("the console still answers after run returned")
	}
}

// With -stay=false (and in a run that fails) the demo exits after its
// summary, which says where the console was.
func TestRunStayFalseExits(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, 5)
	cfg.Out, cfg.ConsoleAddr, cfg.Stay = "", "127.0.0.1:0", false
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, cfg, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("run returned only when its context ended, not after its summary:\n%s", stdout.String())
	}
	if !regexp.MustCompile(`(?m)^  web console      was at http://127\.0\.0\.1:\d+/ while the demo ran \(-stay keeps it up after the summary\)$`).MatchString(stdout.String()) {
		t.Errorf("summary does not say where the console was:\n%s", stdout.String())
	}
}
