package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// show -dlq searches the DLQ topics for the job, and lists its records
// there, in text and JSON; a job only the DLQ knows is found, and a job
// known nowhere names the DLQ topics searched. Without -dlq show says it
// did not search.
func TestJobsShowDLQ(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 4)
	pool, url := jobsDB(t)
	enqueueJob(t, pool, "jobs", "job-1", "")

	stdout, _, err := jobsRun(t, url, "show", "job-1")
	if err != nil || !strings.Contains(stdout, "dlq          not searched: give -dlq all") {
		t.Fatalf("show without -dlq: %v\n%s", err, stdout)
	}
	stdout, _, err = jobsRun(t, url, "show", "job-1", "-dlq", "all", "-brokers", brokers)
	if err != nil {
		t.Fatal(err)
	}
	want := `(?m)^dlq          1 record\(s\) in jobs\.dlq
  \S+  parked in jobs\.dlq/0@1  reason permanent  delivery 1
    error    permanent failure \(permanent\): failure 1`
	if !regexp.MustCompile(want).MatchString(stdout) || !strings.Contains(stdout, "outbox row") {
		t.Errorf("show -dlq all: want\n%s\ngot\n%s", want, stdout)
	}

	// Only the DLQ knows job-2: no error.
	stdout, _, err = jobsRun(t, url, "show", "job-2", "-dlq", "jobs.dlq", "-brokers", brokers, "-json")
	var js struct {
		DLQTopics []string     `json:"dlq_topics"`
		DLQ       []jsonParked `json:"dlq"`
		Outbox    []any        `json:"outbox"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || len(js.DLQ) != 1 || js.DLQ[0].JobID != "job-2" || js.DLQ[0].Offset != 2 ||
		len(js.DLQTopics) != 1 || js.DLQTopics[0] != "jobs.dlq" || len(js.Outbox) != 0 {
		t.Fatalf("show job-2 -dlq -json: %v\n%s", err, stdout)
	}

	if _, _, err = jobsRun(t, url, "show", "job-1", "-dlq", "jobs.dlq,nope.dlq", "-brokers", brokers); err == nil || !strings.Contains(err.Error(), "nope.dlq") {
		t.Errorf("show -dlq with a topic that does not exist: %v", err)
	}
	_, _, err = jobsRun(t, url, "show", "job-70", "-dlq", "all", "-brokers", brokers)
	if err == nil || !strings.Contains(err.Error(), "not in the DLQ topics jobs.dlq") || strings.Contains(err.Error(), "not searched") {
		t.Errorf("show of a job known nowhere: %v", err)
	}
}

// show -dlq reads each DLQ topic newest first, at most -dlq-scan records
// of it: a job among them is found, and of one older show says its
// records were not searched rather than that it is not parked.
func TestJobsShowDLQScan(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 4) // job-0 to job-3 at offsets 0 to 3
	pool, url := jobsDB(t)
	enqueueJob(t, pool, "jobs", "job-1", "")

	stdout, _, err := jobsRun(t, url, "show", "job-1", "-dlq", "all", "-dlq-scan", "2", "-brokers", brokers)
	want := "dlq          not in jobs.dlq\n  searched the newest 2 records of jobs.dlq; older ones not searched (-dlq-scan)\n"
	if err != nil || !strings.Contains(stdout, want) {
		t.Errorf("show job-1 -dlq-scan 2: %v; want\n%s\ngot\n%s", err, want, stdout)
	}
	stdout, _, err = jobsRun(t, url, "show", "job-1", "-dlq", "all", "-dlq-scan", "0", "-brokers", brokers)
	if err != nil || !strings.Contains(stdout, "dlq          1 record(s) in jobs.dlq\n") || strings.Contains(stdout, "not searched") {
		t.Errorf("show job-1 -dlq-scan 0: %v\n%s", err, stdout)
	}

	stdout, _, err = jobsRun(t, url, "show", "job-3", "-dlq", "jobs.dlq", "-dlq-scan", "2", "-brokers", brokers, "-json")
	var js struct {
		DLQSearch []jsonSearch `json:"dlq_search"`
		DLQ       []jsonParked `json:"dlq"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &js) != nil || len(js.DLQ) != 1 || js.DLQ[0].JobID != "job-3" ||
		len(js.DLQSearch) != 1 || js.DLQSearch[0] != (jsonSearch{Topic: "jobs.dlq", Scanned: 2, OlderNotSearched: true}) {
		t.Fatalf("show job-3 -dlq-scan 2 -json: %v\n%s", err, stdout)
	}

	_, _, err = jobsRun(t, url, "show", "job-0", "-dlq", "all", "-dlq-scan", "2", "-brokers", brokers)
	if err == nil || !strings.Contains(err.Error(), "not in the DLQ topics jobs.dlq (searched the newest 2 records of jobs.dlq; older ones not searched: give -dlq-scan 0 to read it whole)") {
		t.Errorf("show of a job older than -dlq-scan, known nowhere else: %v", err)
	}
	if _, _, err = jobsRun(t, url, "show", "job-1", "-dlq", "all", "-dlq-scan", "-1", "-brokers", brokers); err == nil || !strings.Contains(err.Error(), "-dlq-scan -1") {
		t.Errorf("show -dlq-scan -1: %v", err)
	}
}
