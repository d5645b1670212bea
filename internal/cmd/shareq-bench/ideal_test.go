package main

import (
	"slices"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestIdealSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		durs     []time.Duration
		machines int
		finish   []time.Duration
		makespan time.Duration
	}{
		{"empty", nil, 3, []time.Duration{}, 0},
		{"one machine runs jobs back to back", []time.Duration{10 * ms, 20 * ms, 5 * ms}, 1,
			[]time.Duration{10 * ms, 30 * ms, 35 * ms}, 35 * ms},
		{"more machines than jobs", []time.Duration{10 * ms, 20 * ms}, 5,
			[]time.Duration{10 * ms, 20 * ms}, 20 * ms},
		{"a slow job keeps one machine while the other takes the rest in order",
			[]time.Duration{100 * ms, 10 * ms, 10 * ms, 10 * ms}, 2,
			[]time.Duration{100 * ms, 10 * ms, 20 * ms, 30 * ms}, 100 * ms},
		{"each job takes the machine that frees first",
			[]time.Duration{30 * ms, 10 * ms, 10 * ms, 25 * ms, 5 * ms}, 2,
			// m1: 0-30; m2: 0-10, 10-20, 20-45; then m1 30-35
			[]time.Duration{30 * ms, 10 * ms, 20 * ms, 45 * ms, 35 * ms}, 45 * ms},
		{"stream order, not longest first: a late slow job sets the makespan",
			[]time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms, 40 * ms}, 2,
			[]time.Duration{10 * ms, 10 * ms, 20 * ms, 20 * ms, 60 * ms}, 60 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			finish, makespan := idealSchedule(tc.durs, tc.machines)
			if !slices.Equal(finish, tc.finish) || makespan != tc.makespan {
				t.Errorf("idealSchedule = %v, %v; want %v, %v", finish, makespan, tc.finish, tc.makespan)
			}
		})
	}
}

func TestIdealScheduleIsWorkConserving(t *testing.T) {
	t.Parallel()
	// The benchmark's head-of-line mix: the makespan lies between the two
	// lower bounds (total work spread evenly; the last slow job's start
	// plus its length) and their sum.
	jobs := holJobs(holFast, holSlow, holFastDur, holSlowDur, holPartitions)
	h := idealHOL(jobs)
	var total time.Duration
	for _, j := range jobs {
		total += j.Dur
	}
	even := total / holWorkers
	if h.Makespan < even || h.Makespan < holSlowDur {
		t.Fatalf("makespan %v below a lower bound (%v, %v)", h.Makespan, even, holSlowDur)
	}
	if h.Makespan > even+holSlowDur {
		t.Fatalf("makespan %v above the list-scheduling bound %v", h.Makespan, even+holSlowDur)
	}
	if len(h.Times) != len(jobs) {
		t.Fatalf("%d finish times for %d jobs", len(h.Times), len(jobs))
	}
}

func TestIdealSchedulePanicsWithoutMachines(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for 0 machines")
		}
	}()
	idealSchedule([]time.Duration{ms}, 0)
}

func TestBuckets(t *testing.T) {
	t.Parallel()
	got := buckets([]time.Duration{0, 249 * ms, 250 * ms, 999 * ms, -ms}, 250*ms)
	want := []int{3, 1, 0, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("buckets = %v, want %v", got, want)
	}
	if got := buckets(nil, 250*ms); len(got) != 0 {
		t.Fatalf("buckets(nil) = %v", got)
	}
}

func TestHolJobs(t *testing.T) {
	t.Parallel()
	jobs := holJobs(holFast, holSlow, holFastDur, holSlowDur, holPartitions)
	if len(jobs) != holFast+holSlow {
		t.Fatalf("%d jobs", len(jobs))
	}
	var slowAt []int
	parts := map[int32]bool{}
	for i, j := range jobs {
		if j.Index != i || j.Partition != int32(i%holPartitions) {
			t.Fatalf("job %d: %+v", i, j)
		}
		if j.Dur == holSlowDur {
			slowAt = append(slowAt, i)
			parts[j.Partition] = true
		}
	}
	if len(slowAt) != holSlow {
		t.Fatalf("slow jobs at %v, want %d of them", slowAt, holSlow)
	}
	if len(parts) != holSlow {
		t.Errorf("slow jobs at %v share partitions: %v", slowAt, parts)
	}
	// Spread through the stream: one in each fifth.
	for k, i := range slowAt {
		if seg := len(jobs) / holSlow; i/seg != k {
			t.Errorf("slow job %d at %d, not in segment %d", k, i, k)
		}
	}
}

func TestJobCodec(t *testing.T) {
	t.Parallel()
	i, d, err := decodeJob(encodeJob(1234, 4*time.Second))
	if err != nil || i != 1234 || d != 4*time.Second {
		t.Fatalf("round trip = %d, %v, %v", i, d, err)
	}
	if _, _, err := decodeJob([]byte("short")); err == nil {
		t.Fatal("decodeJob accepted a short value")
	}
}

func TestBurstIdeal(t *testing.T) {
	t.Parallel()
	// 48 jobs on 3 workers × 4 slots: 4 waves of 1 s.
	if got := burstIdeal(); got != 4*time.Second {
		t.Fatalf("burstIdeal() = %v, want 4s", got)
	}
}
