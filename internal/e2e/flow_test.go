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

// As many failing jobs as the worker has lanes sit at the head of a
// one-partition topic, with good jobs behind them: an upstream rejects a
// handful of images with a retryable error, say. A share group lets the
// good jobs flow past failing ones, so they should all be done long before
// the failing jobs have used up their deliveries and are parked.
//
// The worker's retry backoff holds a failed record in its lane until the
// hold ends (1 s, 2 s, 4 s, 8 s), and a lane does not poll while it holds a
// record. With every lane holding a failing job, nothing polls; when a
// hold ends, the lane releases its record and polls, and the broker hands
// it the lowest available offset, which is a failing job again. The good
// jobs wait until the failing jobs are parked, some 15 s: head-of-line
// blocking, which share groups exist to avoid.
//
// The bar: every good job is done before any failing job starts its 3rd
// delivery, which the backoff puts at least 2.4 s after its first failure.
// On their own the 40 good jobs take well under a second.
func TestFailingJobsDoNotBlockGoodJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	const lanes, good = 4, 40
	var order []string
	for i := range lanes {
		order = append(order, fmt.Sprintf("failing-%d", i))
	}
	e.produce(t, append(order, ids(good)...)...)

	upstream := errors.New("thumbnails: upstream rejected the image (503)")
	var mu sync.Mutex
	var third time.Time // when the first 3rd delivery of a failing job started
	th := newThumbnailer(10 * time.Millisecond)
	th.fail = func(job *handler.Job) error {
		if !strings.HasPrefix(job.ID(), "failing-") {
			return nil
		}
		if job.DeliveryCount == 3 {
			mu.Lock()
			if third.IsZero() {
				third = time.Now()
			}
			mu.Unlock()
		}
		return upstream
	}
	pl := newParkLog()
	park, _ := e.parkMiddleware(t, pl)
	var dups atomic.Int64
	pool := e.db.connect(t, "", lanes+2)
	start := time.Now()
	e.start(t, th, worker.Use(park, claimsMiddleware(t, pool, &dups)), worker.Concurrency(lanes), worker.Lanes(lanes))

	es := e.obs.waitFor(t, 60*time.Second, "every job done", func(es []event) bool {
		return len(acked(es)) == good+lanes
	})
	var lastGood, firstPark time.Time
	for _, ev := range es {
		if ev.res.Ack == worker.AckAccept && strings.HasPrefix(ev.id, "job-") && ev.at.After(lastGood) {
			lastGood = ev.at
		}
	}
	for _, p := range pl.snapshot() {
		if firstPark.IsZero() || p.at.Before(firstPark) {
			firstPark = p.at
		}
	}
	mu.Lock()
	thirdAt := third
	mu.Unlock()
	t.Logf("%s: %d lanes, %d failing jobs, %d good jobs: the last good job done %v after the start; %d good jobs done before the first failing job's 3rd delivery (%v), %d before the first park (%v)",
		e.c.Kind, lanes, lanes, good, lastGood.Sub(start).Round(time.Millisecond),
		doneBefore(es, thirdAt), thirdAt.Sub(start).Round(time.Millisecond),
		doneBefore(es, firstPark), firstPark.Sub(start).Round(time.Millisecond))
	if thirdAt.IsZero() || !lastGood.Before(thirdAt) {
		t.Errorf("the good jobs waited for the failing ones: %d of %d were done before the failing jobs' 3rd delivery, the last %v after the start; "+
			"a record held for its retry backoff keeps its lane from polling (worker/lane.go runBatch)",
			doneBefore(es, thirdAt), good, lastGood.Sub(start).Round(time.Millisecond))
	}
}

// doneBefore counts the good jobs accepted before t.
func doneBefore(es []event, t time.Time) int {
	n := 0
	for _, ev := range es {
		if ev.res.Ack == worker.AckAccept && strings.HasPrefix(ev.id, "job-") && ev.at.Before(t) {
			n++
		}
	}
	return n
}
