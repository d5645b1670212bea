package worker

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// handOutPool runs n goroutines that take jobs from o and call run with
// each, as handle does; wait waits for them after o.close.
func handOutPool(o *handOut, n int, run func(*xjob)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			wake := make(chan struct{}, 1)
			for {
				j, ok := o.next(wake)
				if !ok {
					return
				}
				run(j)
			}
		})
	}
	return wg.Wait
}

// TestHandOutFansBlockingJobsOut: jobs that block are each taken by a
// goroutine of their own, although a push wakes one goroutine at most and
// each take wakes at most one more.
func TestHandOutFansBlockingJobsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		var o handOut
		var running atomic.Int64
		release := make(chan struct{})
		wait := handOutPool(&o, n, func(*xjob) {
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

// TestHandOutTakesEachJobOnce pushes jobs from one goroutine, never more
// in hand than there are handler goroutines (as run does), while the
// handler goroutines take them, some blocking a while: every job is taken
// exactly once and nothing is left waiting.
func TestHandOutTakesEachJobOnce(t *testing.T) {
	const goroutines, jobs = 8, 200_000
	var o handOut
	taken := make([]atomic.Int32, jobs)
	ended := make(chan struct{}, goroutines)
	wait := handOutPool(&o, goroutines, func(j *xjob) {
		taken[j.key.Offset].Add(1)
		if j.key.Offset%1000 == 0 {
			for range 100 { // a job that takes a while
				runtime.Gosched()
			}
		}
		ended <- struct{}{}
	})
	inHand := 0
	for i := range jobs {
		if inHand == goroutines {
			<-ended
			inHand--
		}
		j := &xjob{}
		j.key.Offset = int64(i)
		o.push(j)
		o.flush()
		inHand++
	}
	for ; inHand > 0; inHand-- {
		<-ended
	}
	o.close()
	wait()
	for i := range taken {
		if n := taken[i].Load(); n != 1 {
			t.Fatalf("job %d taken %d times, want once", i, n)
		}
	}
}

// TestHandOutCloseEndsParkedGoroutines: close lets parked goroutines
// return, and jobs queued before it are still taken.
func TestHandOutCloseEndsParkedGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var o handOut
		var ran atomic.Int64
		wait := handOutPool(&o, 4, func(*xjob) { ran.Add(1) })
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
