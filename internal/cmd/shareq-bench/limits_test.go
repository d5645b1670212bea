package main

import (
	"testing"
	"time"
)

// A job's value carries its produce time, index and destination.
func TestLimitJobRoundTrip(t *testing.T) {
	before := time.Now()
	produced, index, dest, err := decodeLimitJob(limitJob(70000, 9))
	if err != nil || index != 70000 || dest != 9 || produced.Before(before) || time.Since(produced) > time.Minute {
		t.Errorf("decode = %v, %d, %d, %v; want now, 70000, 9", produced, index, dest, err)
	}
	if _, _, _, err := decodeLimitJob([]byte("short")); err == nil {
		t.Error("a short value decoded")
	}
}

// The schedules: every spaces a host's jobs evenly; merge interleaves the
// hosts' by time.
func TestSchedules(t *testing.T) {
	a := every(0, 10, 0, time.Second)
	if len(a) != 10 || a[1].at != 100*time.Millisecond || a[9].at != 900*time.Millisecond {
		t.Fatalf("every(10/s, 1 s) = %v", a)
	}
	m := merge(a, every(1, 2, 50*time.Millisecond, time.Second))
	if len(m) != 12 {
		t.Fatalf("merged %d jobs; want 12", len(m))
	}
	for i := 1; i < len(m); i++ {
		if m[i].at < m[i-1].at {
			t.Fatalf("merged out of order at %d: %v", i, m)
		}
	}
	if m[1].dest != 1 || m[1].at != 50*time.Millisecond {
		t.Errorf("second merged job %+v; want host 1 at 50ms", m[1])
	}
	if got := runsSummary([]int{5, 5, 3}); got != "3 runs: 1 jobs, 5 runs: 2 jobs" {
		t.Errorf("runsSummary = %q", got)
	}
}
