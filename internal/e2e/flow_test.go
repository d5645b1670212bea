package e2e_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// As many failing jobs as the worker has handler slots sit at the head of
// a one-partition topic, with good jobs behind them: an upstream rejects a
// handful of images with a retryable error, say. A share group lets the
// good jobs flow past failing ones, so they should all be done long before
// the failing jobs have used up their deliveries and are parked.
//
// The worker's retry backoff holds a failed record until the hold ends
// (1 s, 2 s, 4 s, 8 s), its lock renewed and its handler slot free. (When
// the worker ran several share-group members, "lanes", before 8dabd8c one
// per slot, a lane did not poll while it held a record: with every lane
// holding a failing job nothing polled, and the good jobs waited until the
// failing ones were parked, some 15 s.)
//
// The bar: every good job is done before any failing job starts its 4th
// delivery, which the backoff puts at least 5.6 s after its first failure
// (0.8 × (1 + 2 + 4) s). On their own the 40 good jobs take well under a
// second on kfake and under two on the broker; stalled, they took 15 s.
func TestFailingJobsDoNotBlockGoodJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	const slots, good = 4, 40
	var order []string
	for i := range slots {
		order = append(order, fmt.Sprintf("failing-%d", i))
	}
	e.produce(t, append(order, ids(good)...)...)

	upstream := errors.New("thumbnails: upstream rejected the image (503)")
	var mu sync.Mutex
	var fourth time.Time // when the first 4th delivery of a failing job started
	th := newThumbnailer(10 * time.Millisecond)
	th.fail = func(job *handler.Job) error {
		if !strings.HasPrefix(job.ID(), "failing-") {
			return nil
		}
		if job.DeliveryCount == 4 {
			mu.Lock()
			if fourth.IsZero() {
				fourth = time.Now()
			}
			mu.Unlock()
		}
		return upstream
	}
	pl := newParkLog()
	park, _ := e.parkMiddleware(t, pl)
	var dups atomic.Int64
	pool := e.db.connect(t, "", slots+2)
	start := time.Now()
	e.start(t, th, worker.Use(park, claimsMiddleware(t, pool, &dups)), worker.Concurrency(slots))

	es := e.obs.WaitFor(t, 60*time.Second, "every job done", func(es []event) bool {
		return len(acked(es)) == good+slots
	})
	var lastGood, firstPark time.Time
	for _, ev := range es {
		if ev.Result.Ack == worker.AckAccept && strings.HasPrefix(ev.ID, "job-") && ev.At.After(lastGood) {
			lastGood = ev.At
		}
	}
	for _, p := range pl.snapshot() {
		if firstPark.IsZero() || p.at.Before(firstPark) {
			firstPark = p.at
		}
	}
	mu.Lock()
	fourthAt := fourth
	mu.Unlock()
	t.Logf("%s: concurrency %d, %d failing jobs, %d good jobs: the last good job done %v after the start; %d good jobs done before the first failing job's 4th delivery (%v), %d before the first park (%v)",
		e.c.Kind, slots, slots, good, lastGood.Sub(start).Round(time.Millisecond),
		doneBefore(es, fourthAt), fourthAt.Sub(start).Round(time.Millisecond),
		doneBefore(es, firstPark), firstPark.Sub(start).Round(time.Millisecond))
	if fourthAt.IsZero() || !lastGood.Before(fourthAt) {
		t.Errorf("the good jobs waited for the failing ones: %d of %d were done before the failing jobs' 4th delivery, the last %v after the start; "+
			"a record held for its retry backoff keeps its slot from other jobs",
			doneBefore(es, fourthAt), good, lastGood.Sub(start).Round(time.Millisecond))
	}
}

// doneBefore counts the good jobs accepted before t.
func doneBefore(es []event, t time.Time) int {
	n := 0
	for _, ev := range es {
		if ev.Result.Ack == worker.AckAccept && strings.HasPrefix(ev.ID, "job-") && ev.At.Before(t) {
			n++
		}
	}
	return n
}

// Jobs that each fail once with a retryable error are held for their
// retry backoff (1 s) with their records locked, on a topic with two
// partitions and more jobs than handler slots; a held job frees its slot,
// so the others keep running and every job finishes, once.
//
// (When the worker ran several share-group members, "lanes", a lane that
// held a slot while its partitions were empty stalled the worker for good
// with records queued; one member fetches from every partition.)
func TestRetryHoldsDoNotBlockOtherJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	const n = 20
	e.produce(t, ids(n)...)
	var dups atomic.Int64
	th := newThumbnailer(10 * time.Millisecond)
	th.fail = func(job *handler.Job) error {
		if job.DeliveryCount == 1 {
			return errors.New("thumbnails: upstream busy (429)")
		}
		return nil
	}
	pool := e.db.connect(t, "", 6)
	start := time.Now()
	e.start(t, th, worker.Use(claimsMiddleware(t, pool, &dups)), worker.Concurrency(4))

	// Each job's 1 s hold overlaps the others': the jobs take a few
	// seconds.
	e.obs.WaitFor(t, 30*time.Second, "every job accepted", func(es []event) bool { return len(acked(es)) >= n })
	checkOnce(t, e, ids(n))
	t.Logf("%s: %d jobs retried once on 2 partitions, concurrency 4: done in %v",
		e.c.Kind, n, time.Since(start).Round(time.Millisecond))
}
