package worker

import (
	"math"
	"time"
)

const (
	// prefetchEvery is how often the executor measures its job rate and
	// recomputes the prefetch.
	prefetchEvery = 250 * time.Millisecond
	// fetchesAhead is how many fetch round trips of jobs the prefetch
	// covers at the observed rate: a fetch brings what the jobs finished
	// while the one before it was out, so a session with one request at a
	// time needs records for several round trips to never wait for
	// credit, and its fetches grow with the rate instead of staying at the
	// handful of slots that free up during one round trip.
	fetchesAhead = 4
	// prefetchHorizon is the least time of jobs, at the observed rate,
	// the prefetch covers: a fetch also waits for the member's own work
	// between requests, which the round trip does not show (on an
	// in-process broker it is most of the cycle).
	prefetchHorizon = 10 * time.Millisecond
	// prefetchMax is the hard ceiling of the prefetch, in records beyond
	// Concurrency, whatever the rate.
	prefetchMax = 4096
	// rateWeight is the weight of the latest reading in the job rate's
	// moving average (a time constant of about a second).
	rateWeight = 0.25
)

// reading measures the job rate and recomputes the prefetch (prefetchFor),
// and has the locks of records that wait long for a slot renewed
// (keepQueuedLocks). While stopping there is no prefetch.
func (x *executor) reading() {
	now := x.now()
	x.keepQueuedLocks(now)
	x.summarizeBreakers(now, false)
	dt := now.Sub(x.lastReading).Seconds()
	x.lastReading = now
	if dt <= 0 {
		return
	}
	r := float64(x.completed) / dt
	x.completed = 0
	if x.rate == 0 {
		x.rate = r
	} else if x.rate += rateWeight * (r - x.rate); x.rate < 0.01 {
		x.rate = 0 // idle: known no longer
	}
	if !x.stopping() {
		st := x.m.Stats()
		x.prefetch = prefetchFor(x.rate, st.FetchRTT, x.lockSeen)
		x.partitions = st.Partitions
	}
	x.pubRunning.Store(int64(x.running))
	x.pubQueued.Store(int64(x.queued))
	x.pubWaiting.Store(int64(x.waiting))
	x.pubSnoozed.Store(int64(x.snoozed))
	x.pubBreakers.Store(int64(x.breakersOpen))
	x.pubHalted.Store(int64(x.halted))
}

// counts returns the handlers running and the records waiting for a slot,
// as of the last prefetch reading (every prefetchEvery, until the stop);
// safe for concurrent use.
func (x *executor) counts() (running, queued int) {
	return int(x.pubRunning.Load()), int(x.pubQueued.Load())
}

// prefetchFor is the prefetch, in records beyond Concurrency, for a job
// rate (per second), a fetch round trip and a lock duration: the jobs of
// fetchesAhead round trips (at least prefetchHorizon) at that rate
// (Little's law), so short jobs get many records in hand and long jobs
// few; never so many that a queued record would wait more than a quarter
// of its lock for a handler (the jobs ahead of it take about prefetch ÷
// rate); and at most prefetchMax. No rate or round trip yet: none.
func prefetchFor(rate float64, rtt, lock time.Duration) int {
	if rate <= 0 || rtt <= 0 || lock <= 0 {
		return 0
	}
	horizon := max(fetchesAhead*rtt, prefetchHorizon)
	n := math.Ceil(rate * horizon.Seconds())
	n = min(n, math.Floor(rate*lock.Seconds()/4), prefetchMax)
	return max(int(n), 0)
}

// topUp grants credit up to Concurrency + prefetch records in hand or on
// the way. A job that finishes while the target shrank gives back no
// credit.
func (x *executor) topUp() {
	if x.stopping() || x.pause != nil {
		return
	}
	// Jobs waiting for their keys will need the rate's tokens too.
	n := x.conc + x.prefetch - x.running - x.queued - len(x.reruns) - x.waitingOver() - x.outstanding
	if n = x.cfg.Rate.room(x.now(), n, x.queued+x.waiting+x.outstanding); n > 0 {
		x.outstanding += n
		x.m.Grant(n)
	}
}
