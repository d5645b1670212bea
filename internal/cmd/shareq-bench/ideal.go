package main

import (
	"container/heap"
	"time"
)

// idealSchedule is the work-conserving schedule of jobs on machines: list
// scheduling in stream order, each job starting on the machine that frees
// up first, with no fetch, ack or scheduling cost. Its makespan is the
// physical limit for running the jobs in that order on that many workers.
// It returns each job's finish time, from 0, and the makespan.
func idealSchedule(durations []time.Duration, machines int) (finish []time.Duration, makespan time.Duration) {
	if machines < 1 {
		panic("idealSchedule: machines must be at least 1")
	}
	free := make(freeTimes, machines) // all free at 0
	finish = make([]time.Duration, len(durations))
	for i, d := range durations {
		start := free[0]
		finish[i] = start + d
		free[0] = finish[i]
		heap.Fix(&free, 0)
		makespan = max(makespan, finish[i])
	}
	return finish, makespan
}

// freeTimes is a min-heap of the times at which machines become free.
type freeTimes []time.Duration

func (h freeTimes) Len() int           { return len(h) }
func (h freeTimes) Less(i, j int) bool { return h[i] < h[j] }
func (h freeTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *freeTimes) Push(x any)        { *h = append(*h, x.(time.Duration)) }
func (h *freeTimes) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// buckets counts the completion times (from 0) falling in each interval of
// width, [0,width), [width,2·width)…, up to the last completion.
func buckets(done []time.Duration, width time.Duration) []int {
	if width <= 0 {
		panic("buckets: width must be positive")
	}
	var out []int
	for _, d := range done {
		if d < 0 {
			d = 0
		}
		i := int(d / width)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

// holJob is one job of the head-of-line scenario, in stream order.
type holJob struct {
	Index     int
	Partition int32
	Dur       time.Duration
}

// holJobs lays out fast jobs of fastDur and slow jobs of slowDur in stream
// order, round-robin over partitions. The slow jobs sit in the middle of
// equal segments of the stream, so they are spread in time, and (for the
// sizes the benchmark uses) on different partitions.
func holJobs(fast, slow int, fastDur, slowDur time.Duration, partitions int) []holJob {
	n := fast + slow
	jobs := make([]holJob, n)
	isSlow := make(map[int]bool, slow)
	if slow > 0 {
		seg := n / slow
		for k := range slow {
			isSlow[k*seg+seg/2] = true
		}
	}
	for i := range jobs {
		d := fastDur
		if isSlow[i] {
			d = slowDur
		}
		jobs[i] = holJob{Index: i, Partition: int32(i % partitions), Dur: d}
	}
	return jobs
}
