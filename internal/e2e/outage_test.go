package e2e_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// outageJobs is how many jobs an outage test runs; the outage starts when
// a quarter of them are done.
const outageJobs = 200

// outageLength is how long the database is unreachable.
const outageLength = 3 * time.Second

// The database goes away for outageLength while 200 jobs run, each writing
// a row through its claim. Jobs that hit the outage fail (their claim
// cannot begin, or their transaction dies under them) and are RELEASEd; a
// retry hold outside the claim spaces their deliveries so the outage does
// not use up their delivery limit. After the database is back every job's
// row exists exactly once.
//
// The numbers, with D the outage, L the delivery limit and h the hold:
//
//   - A failing delivery is held h, then released, and delivered again at
//     once, so a job fails at t0, t0+h, t0+2h, … while the database is
//     down: at most ceil(D/h) failures, plus one for a delivery that
//     starts just as the database comes back and loses the race.
//   - h = D/(L-3) makes that at most L-2 failures, so no job gets past
//     delivery L-1 and one delivery is to spare. With D = 3 s and L = 5
//     (both clusters), h = 1.5 s and a job fails at most 3 times.
//   - h is shorter than the record lock (2 s on kfake, 5 s on the real
//     broker), and the worker renews a lock at half its duration anyway,
//     so a held job never loses its lock: the hold delays the RELEASE, it
//     does not turn into a lock expiry.
//   - The whole run takes about D + 2h plus the jobs' own time: ~7 s.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)
	limit := e.c.DeliveryLimit
	if limit < 4 {
		t.Fatalf("delivery limit %d: the outage test needs at least 4 (see the numbers above)", limit)
	}
	hold := outageLength / time.Duration(limit-3)
	r := runOutage(t, e, hold)

	if len(r.exhausted) > 0 {
		t.Errorf("%d jobs used up their delivery limit of %d: %v", len(r.exhausted), limit, r.exhausted)
	}
	if r.maxDelivery > int32(limit-1) {
		t.Errorf("a job was delivered %d times, want at most %d (one delivery to spare)", r.maxDelivery, limit-1)
	}
	if len(r.released) == 0 || r.refused == 0 {
		t.Errorf("%d jobs released and %d connections refused: the outage did not reach the worker; %s",
			len(r.released), r.refused, summarize(r.events))
	}
	for id := range r.released {
		if !r.accepted[id] {
			t.Errorf("job %s was released and never accepted", id)
		}
	}
	if len(r.accepted) != outageJobs {
		t.Errorf("%d of %d jobs accepted", len(r.accepted), outageJobs)
	}
	checkOnce(t, e, ids(outageJobs))
	t.Logf("%s: %d jobs; outage %v, hold %v, delivery limit %d; %d jobs released (%d releases, most deliveries of one job %d), "+
		"duplicates suppressed %d, handler runs %d, connections refused during the outage %d",
		e.c.Kind, outageJobs, outageLength, hold, limit, len(r.released), r.releases, r.maxDelivery, r.dups, r.runs, r.refused)
}

// The same outage without the retry hold: what the stack does on its own.
// The idempotency middleware turns the failed claim into a retryable error
// at once, the worker RELEASEs at once, and the broker delivers the job
// again at once, so each job that meets the outage burns through its whole
// delivery limit in milliseconds and is archived by the broker: a database
// outage of a few seconds loses every job that was queued.
//
// This test fails until the worker (or the claim middleware) spaces the
// deliveries of jobs that fail for a reason outside the job, for example
// a hold before a RELEASE of a retryable error, as retryHold does here.
func TestPostgresOutageWithoutHold(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)
	r := runOutage(t, e, 0)
	if len(r.exhausted) > 0 {
		t.Errorf("a %v database outage used up the delivery limit (%d) of %d jobs, which the broker archived, "+
			"the last %v after the cut: %d releases in the outage, only %d of %d jobs done",
			outageLength, e.c.DeliveryLimit, len(r.exhausted), r.lastArchived.Round(time.Millisecond),
			r.releases, len(r.accepted), outageJobs)
	}
	if len(r.accepted) != outageJobs {
		t.Errorf("%d of %d jobs accepted", len(r.accepted), outageJobs)
	}
	checkOnce(t, e, ids(outageJobs))
	t.Logf("%s: %d jobs; outage %v, no hold, delivery limit %d; %d jobs released (%d releases), %d archived at the limit, duplicates suppressed %d",
		e.c.Kind, outageJobs, outageLength, e.c.DeliveryLimit, len(r.released), r.releases, len(r.exhausted), r.dups)
}

// outageRun is what runOutage saw.
type outageRun struct {
	events      []event
	accepted    map[string]bool
	released    map[string]bool // jobs released at least once
	releases    int
	exhausted   []string // jobs released on their last delivery: archived by the broker
	maxDelivery int32
	dups        int64
	runs        int
	refused     int64
	// lastArchived is how long after the cut the last job was archived.
	lastArchived time.Duration
}

// runOutage runs outageJobs jobs through a worker whose pool reaches
// Postgres through a proxy, cuts the proxy for outageLength once a quarter
// of the jobs are done, restores it, and waits until every job is
// accepted or archived at its delivery limit. hold > 0 puts retryHold(hold)
// outside the claim.
func runOutage(t *testing.T, e *env, hold time.Duration) outageRun {
	t.Helper()
	e.produce(t, ids(outageJobs)...)
	px := newProxy(t, dbAddr(t, e.db.url))
	const concurrency = 8
	pool := e.db.connect(t, px.Addr(), concurrency+2)
	var dups atomic.Int64
	th := newThumbnailer(20 * time.Millisecond)
	mws := []handler.Middleware{claimsMiddleware(t, pool, &dups)}
	if hold > 0 {
		mws = append([]handler.Middleware{retryHold(hold)}, mws...)
	}
	e.start(t, th, worker.Use(mws...), worker.Concurrency(concurrency))

	e.obs.waitFor(t, 60*time.Second, "a quarter of the jobs done", func(es []event) bool {
		return len(acked(es)) >= outageJobs/4
	})
	px.Cut()
	cut := time.Now()
	time.Sleep(outageLength)
	px.Restore()

	limit := int32(e.c.DeliveryLimit)
	exhausted := func(es []event) map[string]bool {
		out := map[string]bool{}
		for _, ev := range es {
			if ev.res.Ack == worker.AckRelease && ev.count >= limit {
				out[ev.id] = true
			}
		}
		return out
	}
	es := e.obs.waitFor(t, 60*time.Second, "every job accepted or archived", func(es []event) bool {
		return len(acked(es))+len(exhausted(es)) >= outageJobs
	})
	r := outageRun{events: es, accepted: acked(es), released: map[string]bool{}, dups: dups.Load(), runs: th.totalRuns(), refused: px.refused.Load()}
	for _, ev := range es {
		r.maxDelivery = max(r.maxDelivery, ev.count)
		if ev.res.Ack == worker.AckRelease {
			r.releases++
			r.released[ev.id] = true
			if ev.count >= limit {
				r.lastArchived = max(r.lastArchived, ev.at.Sub(cut))
			}
		}
	}
	for id := range exhausted(es) {
		r.exhausted = append(r.exhausted, id)
	}
	slices.Sort(r.exhausted)
	return r
}

// retryHold returns middleware that holds a job that failed with a
// retryable error for d before returning the error, so its RELEASE, and
// the next delivery, come d later. The worker keeps the job's lock
// renewed meanwhile. The handler's context ending (shutdown) ends the hold.
func retryHold(d time.Duration) handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			err := next.Handle(ctx, job)
			if err == nil || handler.IsPermanent(err) {
				return err
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			return err
		})
	}
}

// dbAddr returns "host:port" of the database url names.
func dbAddr(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", envDatabaseURL, err)
	}
	if cfg.ConnConfig.Host == "" || cfg.ConnConfig.Host[0] == '/' {
		t.Fatalf("%s names a Unix socket (%q); the outage proxy needs a TCP address", envDatabaseURL, cfg.ConnConfig.Host)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}
