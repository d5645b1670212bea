package e2e_test

import (
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/internal/workertest"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

// outageJobs is how many jobs an outage test runs; the outage starts when
// a quarter of them are done.
const outageJobs = 200

// outageLength is how long the database is unreachable.
const outageLength = 3 * time.Second

// The database goes away for outageLength while 200 jobs run, each writing
// a row through its claim, on the stack as shipped (the worker's default
// retry backoff). Jobs that hit the outage fail (their claim cannot begin,
// or their transaction dies under them) and are RELEASEd after a backoff
// hold, which spaces their deliveries so the outage does not use up their
// delivery limit. After the database is back every job's row exists
// exactly once, and no job is lost.
//
// The numbers, with D the outage, L the delivery limit and h(n) the hold
// after a failed delivery n (base × 2^(n-1), ±20%: 1 s, 2 s, 4 s, …):
//
//   - A job fails first at t0 ≥ 0 (the cut) and is delivered again at
//     t0 + h(1), t0 + h(1) + h(2), …: its delivery n+1 comes at least
//     0.8 × base × (2^n - 1) after its first failure.
//   - Delivery L-1 comes at least 0.8 × base × (2^(L-2) - 1) after the
//     first failure: 5.6 s with L = 5. D must be shorter, so that delivery
//     finds the database back and one delivery is left to spare. With
//     D = 3 s a job fails at most 3 times (at t0, ≥ t0+0.8 s and
//     ≥ t0+2.4 s) and is done by its 4th delivery.
//   - Holds of 1 to 4.8 s outlast kfake's 2 s lock, so the worker renews
//     held records there; on the broker (5 s lock) it renews at half the
//     lock. A hold never turns into a lock expiry.
//   - The run takes about D plus the longest hold after it (≤ 4.8 s) plus
//     the jobs' own time: ~10 s.
//
// Without the backoff (RetryBackoff(nil), or before the worker had one)
// the same outage made the 150 jobs not yet done use up their 5
// deliveries in under a second and the broker archived them: 750 releases,
// 150 jobs lost.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	e := setup(t, 3)
	limit := e.c.DeliveryLimit
	budget := time.Duration(0.8 * float64(worker.RetryBackoffBaseDefault) * float64(int(1)<<(limit-2)-1))
	if limit < 3 || outageLength >= budget {
		t.Fatalf("delivery limit %d: the default backoff spreads deliveries 1 to %d over %v, not longer than the %v outage (see the numbers above)",
			limit, limit-1, budget, outageLength)
	}
	r := runOutage(t, e)

	if len(r.exhausted) > 0 {
		t.Errorf("%d jobs used up their delivery limit of %d and were archived: %s", len(r.exhausted), limit, abbrev(r.exhausted))
	}
	if r.maxDelivery > int32(limit-1) {
		t.Errorf("a job was delivered %d times, want at most %d (one delivery to spare)", r.maxDelivery, limit-1)
	}
	if len(r.released) == 0 || r.refused == 0 {
		t.Errorf("%d jobs released and %d connections refused: the outage did not reach the worker; %s",
			len(r.released), r.refused, workertest.Summary(r.events))
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
	t.Logf("%s: %d jobs; outage %v, delivery limit %d, default backoff; %d jobs released (%d releases, most deliveries of one job %d), "+
		"duplicates suppressed %d, handler runs %d, connections refused during the outage %d",
		e.c.Kind, outageJobs, outageLength, limit, len(r.released), r.releases, r.maxDelivery, r.dups, r.runs, r.refused)
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
}

// runOutage runs outageJobs jobs through a worker whose pool reaches
// Postgres through a proxy, cuts the proxy for outageLength once a quarter
// of the jobs are done, restores it, and waits until every job is
// accepted or archived at its delivery limit.
func runOutage(t *testing.T, e *env) outageRun {
	t.Helper()
	e.produce(t, ids(outageJobs)...)
	px := cutproxy.New(t, dbAddr(t, e.db.url), false)
	const concurrency = 8
	pool := e.db.connect(t, px.Addr(), concurrency+2)
	var dups atomic.Int64
	th := newThumbnailer(20 * time.Millisecond)
	e.start(t, th, worker.Use(claimsMiddleware(t, pool, &dups)), worker.Concurrency(concurrency))

	e.obs.WaitFor(t, 60*time.Second, "a quarter of the jobs done", func(es []event) bool {
		return len(acked(es)) >= outageJobs/4
	})
	px.Cut()
	time.Sleep(outageLength)
	px.Restore()

	limit := int32(e.c.DeliveryLimit)
	exhausted := func(es []event) map[string]bool {
		out := map[string]bool{}
		for _, ev := range es {
			if ev.Res.Ack == worker.AckRelease && ev.Count >= limit {
				out[ev.ID] = true
			}
		}
		return out
	}
	es := e.obs.WaitFor(t, 60*time.Second, "every job accepted or archived", func(es []event) bool {
		return len(acked(es))+len(exhausted(es)) >= outageJobs
	})
	r := outageRun{events: es, accepted: acked(es), released: map[string]bool{}, dups: dups.Load(), runs: th.totalRuns(), refused: px.Refused()}
	for _, ev := range es {
		r.maxDelivery = max(r.maxDelivery, ev.Count)
		if ev.Res.Ack == worker.AckRelease {
			r.releases++
			r.released[ev.ID] = true
		}
	}
	for id := range exhausted(es) {
		r.exhausted = append(r.exhausted, id)
	}
	slices.Sort(r.exhausted)
	return r
}

// dbAddr returns "host:port" of the database url names.
func dbAddr(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", pgtest.EnvURL, err)
	}
	if cfg.ConnConfig.Host == "" || cfg.ConnConfig.Host[0] == '/' {
		t.Fatalf("%s names a Unix socket (%q); the outage proxy needs a TCP address", pgtest.EnvURL, cfg.ConnConfig.Host)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}
