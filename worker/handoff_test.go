package worker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// handoffPool runs n goroutines that take jobs from o and call run with
// each, as handle does; wait waits for them after o.close.
func handoffPool(o *handoff, n int, run func(*xjob)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			wake := make(chan struct{}, 1)
			var r xresult
			var last *xresult
			for {
				j, _, ok := o.next(last, wake)
				if !ok {
					return
				}
				run(j)
				r, last = xresult{j: j}, &r
			}
		})
	}
	return wg.Wait
}

// TestHandoffFansBlockingJobsOut: jobs that block are each taken by a
// goroutine of their own, although a push wakes one goroutine at most and
// each take wakes at most one more.
func TestHandoffFansBlockingJobsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		o := newHandoff()
		var running atomic.Int64
		release := make(chan struct{})
		wait := handoffPool(o, n, func(*xjob) {
			running.Add(1)
			<-release
			running.Add(-1)
		})
		synctest.Wait() // every goroutine parked
		for range n {
			o.push(&xjob{})
		}
		o.flush()
		synctest.Wait()
		if got := running.Load(); got != n {
			t.Fatalf("%d jobs running at once, want all %d: a queued job waits for a busy goroutine", got, n)
		}
		close(release)
		o.close()
		wait()
	})
}

// TestHandoffTakesEachJobOnce plays run: it starts jobs, never more in
// hand than there are handler goroutines, and takes their results when
// ready signals, while the goroutines take the jobs, some blocking a
// while: every job is taken exactly once, its result comes back exactly
// once, and nothing is left waiting.
func TestHandoffTakesEachJobOnce(t *testing.T) {
	const goroutines, jobs = 8, 200_000
	o := newHandoff()
	taken := make([]atomic.Int32, jobs)
	wait := handoffPool(o, goroutines, func(j *xjob) {
		taken[j.job.Offset].Add(1)
		if j.job.Offset%1000 == 0 {
			for range 100 { // a job that takes a while
				runtime.Gosched()
			}
		}
	})
	results := make([]int, jobs)
	inHand := 0
	collect := func() {
		<-o.ready
		for _, r := range o.take() {
			results[r.j.job.Offset]++
			inHand--
		}
	}
	for i := range jobs {
		for inHand == goroutines {
			collect()
		}
		j := &xjob{}
		j.job.Offset = int64(i)
		o.push(j)
		if i%3 == 0 { // several jobs a flush, as a turn of run starts them
			o.flush()
		}
		inHand++
	}
	o.flush()
	for inHand > 0 {
		collect()
	}
	o.close()
	wait()
	for i := range taken {
		if n := taken[i].Load(); n != 1 {
			t.Fatalf("job %d taken %d times, want once", i, n)
		}
		if results[i] != 1 {
			t.Fatalf("job %d's result came back %d times, want once", i, results[i])
		}
	}
}

// TestHandoffCloseEndsParkedGoroutines: close lets parked goroutines
// return, and jobs queued before it are still taken.
func TestHandoffCloseEndsParkedGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newHandoff()
		var ran atomic.Int64
		wait := handoffPool(o, 4, func(*xjob) { ran.Add(1) })
		synctest.Wait()
		o.push(&xjob{})
		o.push(&xjob{})
		o.flush()
		o.close()
		wait()
		if got := ran.Load(); got != 2 {
			t.Fatalf("%d jobs ran, want the 2 pushed before close", got)
		}
	})
}
