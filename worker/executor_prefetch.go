package worker

import (
	"math"
	"time"

	"github.com/shareq/shareq/internal/member"
)

const (
	// prefetchEvery is how often the executor measures its job rate and
	// recomputes the prefetch.
	prefetchEvery = 250 * time.Millisecond
	// firstReadingEvery is how often it does so over the first
	// prefetchEvery after jobs start with no rate known (reading).
	firstReadingEvery = 25 * time.Millisecond
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
	// wholeBatchHorizon is the most time of jobs, at the observed rate,
	// that the prefetch may hold in order to fetch whole producer batches
	// (prefetchFor).
	wholeBatchHorizon = 200 * time.Millisecond
)

// reading measures the job rate and recomputes the prefetch (prefetchFor),
// and has the locks of records that wait long for a slot renewed
// (keepQueuedLocks). While stopping there is no prefetch.
//
// Its rate is a moving average of each reading's, but over the first
// readings after jobs start with no rate known (beginReadings) it is the
// jobs done since that start over prefetchEvery (or the time since, if
// longer), read every firstReadingEvery: a worker's fetches start to grow
// with its handlers within tens of milliseconds, where a first reading
// after a quarter second kept them at Concurrency until then, and the
// rate is never more than a quarter-second window of the same jobs reads.
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
	switch {
	case x.firstReadings > 0:
		x.firstDone += x.completed
		// Over at least prefetchEvery: jobs that end together just after
		// the first (a clump of equal jobs started at once) would read
		// as a rate many times the true one over a shorter span, and a
		// prefetch that large drains only at the true rate.
		x.rate = float64(x.firstDone) / max(now.Sub(x.firstJob), prefetchEvery).Seconds()
		if x.firstReadings--; x.firstReadings == 0 {
			x.readings.Reset(prefetchEvery)
		}
	case x.rate == 0:
		x.rate = r
	default:
		if x.rate += rateWeight * (r - x.rate); x.rate < 0.01 {
			x.rate = 0 // idle: known no longer
		}
	}
	x.completed = 0
	if !x.stopping() {
		st := x.m.Stats()
		x.prefetch, x.chunk, x.reserve = prefetchFor(x.rate, st.FetchRTT, x.lockSeen, x.wholeBatches(st))
		x.slack = chunkSlack(x.chunk, st.Fetchers)
		x.partitions = st.Partitions
	}
	x.pubRunning.Store(int64(x.running))
	x.pubQueued.Store(int64(x.queued))
	x.pubWaiting.Store(int64(x.waiting))
	x.pubSnoozed.Store(int64(x.snoozed))
	x.pubBreakers.Store(int64(x.breakersOpen))
	x.pubHalted.Store(int64(x.halted))
}

// beginReadings starts the first readings (reading): a job starts at now
// with no rate known, at the start or after the worker idled.
func (x *executor) beginReadings(now time.Time) {
	x.firstJob, x.firstDone, x.completed = now, 0, 0 // jobs done before now are no part of the rate since
	x.firstReadings = int(prefetchEvery / firstReadingEvery)
	x.readings.Reset(firstReadingEvery)
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
//
// whole is the credit at which fetches cover whole producer batches
// (member.Stats.WholeBatches; 0: unknown, or not wanted). When it is more
// than a round trip of jobs, a fetch of the credit freed meanwhile splits
// the producer batches, and Kafka reads and sends a whole batch for each
// such fetch: with fetches of about 300 records (Concurrency 100) from
// batches of 3,300, the broker spent more CPU per job than the worker
// (BENCHMARKS.md section 9.4). If the rate allows, the prefetch then holds a whole
// batch's credit more, chunk is that credit, and topUp grants it in
// chunks once fewer than reserve records (the prefetch without it) wait
// in hand, so that each fetch takes whole batches (batch_optimized). The
// rate allows it when the records in hand, up to prefetch and a chunk
// more, are at most a quarter of the lock and at most wholeBatchHorizon
// of jobs; otherwise chunk is 0.
func prefetchFor(rate float64, rtt, lock time.Duration, whole int) (prefetch, chunk, reserve int) {
	if rate <= 0 || rtt <= 0 || lock <= 0 {
		return 0, 0, 0
	}
	horizon := max(fetchesAhead*rtt, prefetchHorizon)
	n := math.Ceil(rate * horizon.Seconds())
	n = min(n, math.Floor(rate*lock.Seconds()/4), prefetchMax)
	prefetch = max(int(n), 0)
	if float64(whole) <= rate*rtt.Seconds() {
		return prefetch, 0, 0 // a round trip's credit covers a batch already
	}
	if float64(prefetch+2*whole) > rate*min(lock/4, wholeBatchHorizon).Seconds() { // topUp may grant past prefetch by a chunk
		return prefetch, 0, 0
	}
	return prefetch + whole, whole, prefetch
}

// wholeBatches is the credit at which fetches cover whole producer
// batches, as the member last saw them, for prefetchFor; 0 with a rate
// limit or priorities, whose grants and fetches follow their own rules.
func (x *executor) wholeBatches(st member.Stats) int {
	if x.cfg.Rate != nil || x.lanes != nil {
		return 0
	}
	return st.WholeBatches
}

// chunkSlack is what of a chunk of credit may stay on the way for good
// while the rest was used up: the share of every session but one, when
// fetchers sessions share it. A session whose partitions have nothing
// left (one broker's partitions drained before the others') asks for its
// share in every fetch and gets nothing; waiting for all of a chunk to
// be used up then granted nothing more until that session's long poll
// came back, and on three brokers the last records of a run came a few
// hundred a second for a second or two (BENCHMARKS.md, section 9.4).
func chunkSlack(chunk, fetchers int) int {
	if chunk <= 0 || fetchers <= 1 {
		return 0
	}
	return chunk - chunk/fetchers
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
	if x.chunk > 0 {
		// Whole producer batches (prefetchFor): credit goes out a whole
		// batch at a time, and only once the last grant was used up (a
		// debt repaid too; but slack, which sessions with nothing to
		// fetch may hold), since the member fetches whatever credit it
		// has, and a fetch for less than a batch splits batches; while
		// reserve records are queued, not even that.
		if x.outstanding > x.slack {
			return
		}
		if x.outstanding+n < x.chunk {
			if x.queued >= x.reserve {
				return
			}
			n = x.chunk - x.outstanding // past the target by less than a chunk
		}
	}
	if n = x.cfg.Rate.room(x.now(), n, x.queued+x.waiting+x.outstanding); n > 0 {
		x.outstanding += n
		x.m.Grant(n)
	}
}
