package main

import (
	"strings"
	"testing"
	"time"
)

// A stall is timed from the first worker's report to the first report
// that it moves; the other workers' reports of the same stall count
// nothing more, and a partition still stalled at the end is named.
func TestStallTallyTimesEachStallFromItsFirstReport(t *testing.T) {
	var s stallTally
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	s.event("stall", []string{"jobs/3", "true"}, at)
	s.event("stall", []string{"jobs/3", "true"}, at.Add(2*time.Second)) // a second worker
	s.event("heal", []string{"jobs/3", "skipped"}, at.Add(3*time.Second))
	s.event("heal", []string{"jobs/3", "freed"}, at.Add(8*time.Second))
	s.event("stall", []string{"jobs/3", "false"}, at.Add(9*time.Second))
	s.event("stall", []string{"jobs/3", "false"}, at.Add(10*time.Second))
	s.event("stall", []string{"jobs/5", "true"}, at.Add(20*time.Second))

	got := strings.Join(s.report().lines(), "\n")
	for _, want := range []string{"2 reported", "freed 1, skipped 1", "jobs/3 after 9s", "still stalled          jobs/5"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	var none stallTally
	if got := none.report().lines(); len(got) != 1 || !strings.Contains(got[0], "none reported") {
		t.Errorf("report without stalls: %q", got)
	}
}
