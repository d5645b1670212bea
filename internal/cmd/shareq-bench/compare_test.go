package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRun writes rows as one run's results.csv in a new directory.
func writeRun(t *testing.T, rows ...row) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	if err := writeCSV(&b, rows); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.csv"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Two builds' runs side by side: each figure's median, range and run
// count per build, the second's median over the first's; env rows left
// out; a figure one build lacks shown as "-".
func TestCompareMediansAndRatios(t *testing.T) {
	rate := func(v float64) row {
		return row{Backend: "kafka", Scenario: "overhead", Variant: "shareq concurrency=100", Metric: "jobs_per_s", Value: v, Unit: "jobs/s"}
	}
	cpu := func(v float64) row {
		return row{Backend: "kafka", Scenario: "overhead", Variant: "shareq concurrency=100", Metric: "cpu_per_job", Value: v, Unit: "us"}
	}
	env := row{Backend: "-", Scenario: "env", Variant: "machine", Metric: "nproc", Value: 2, Unit: "cores"}
	only := row{Backend: "kafka", Scenario: "overhead", Variant: "shareq concurrency=1000", Metric: "jobs_per_s", Value: 5, Unit: "jobs/s"}
	old := []string{writeRun(t, env, rate(100), cpu(4)), writeRun(t, rate(300), cpu(6)), writeRun(t, rate(200), cpu(5))}
	nw := []string{writeRun(t, env, rate(250), cpu(3), only), writeRun(t, rate(350), cpu(2))}
	var out bytes.Buffer
	if err := runCompare([]string{"old=" + strings.Join(old, ","), "new=" + strings.Join(nw, ",")}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	got := strings.Join(strings.Fields(out.String()), " ") // the columns' widths aside
	for _, want := range []string{
		"old median (min–max, runs)", "new/old",
		"== kafka: overhead",
		"concurrency=100 jobs_per_s (jobs/s) 200 (100–300, 3) 300 (250–350, 2) 1.50",
		"concurrency=100 cpu_per_job (us) 5 (4–6, 3) 2.50 (2–3, 2) 0.50",
		"concurrency=1000 jobs_per_s (jobs/s) - 5 (5–5, 1) -",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("comparison lacks %q", want)
		}
	}
	if strings.Contains(got, "nproc") {
		t.Error("comparison shows the env rows")
	}
}

func TestCompareBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"old=a"}, {"old=a", "new"}, {"=a", "new=b"}, {"old=", "new=b"}} {
		if err := runCompare(args, &bytes.Buffer{}); err == nil {
			t.Errorf("compare %q: no error", args)
		}
	}
	if err := runCompare([]string{"old=" + t.TempDir(), "new=" + t.TempDir()}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "results.csv") {
		t.Errorf("compare of directories without results.csv = %v; want an error naming it", err)
	}
}
