package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// logged is a JSON slog logger writing to a buffer a test reads.
type logged struct {
	buf logbuf.Buffer
	log *slog.Logger
}

func newLogged() *logged {
	l := &logged{}
	l.log = slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l
}

// lines returns the records logged at level whose message starts with
// prefix.
func (l *logged) lines(t *testing.T, level slog.Level, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.buf.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] == level.String() && strings.HasPrefix(rec["msg"].(string), prefix) {
			out = append(out, rec)
		}
	}
	return out
}

// poolOf returns a migrated pool of maxConns connections on a schema of
// the test's own, with a table for the handlers' own writes.
func poolOf(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, _ := pgtest.NewPool(t, maxConns)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	if _, err := pool.Exec(t.Context(), "CREATE TABLE send_slots (job text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	sideEffects(t, pool)
	return pool
}

const (
	starvedWarn = "pgstore: claims wait for Postgres connections"
	fedInfo     = "pgstore: claims get Postgres connections again"
)

// The trial of issue 29: an e-mail handler that reads a template and
// reserves a send slot on the application's pool, besides writing through
// pgstore.Tx, on pgx's default pool of 4 connections (2 cores) and ten jobs
// at once. The claims used to take all four connections, their handlers
// waited for a fifth, and the claims still waiting for a connection came
// back as a Postgres outage after StatementTimeout, pausing the worker,
// while Postgres was healthy. Now at most three claims hold a connection
// at once, one stays free for the handlers, and every job finishes.
func TestHandlersThatUseThePoolDoNotStallClaims(t *testing.T) {
	t.Parallel()
	const jobs = 10
	pool := poolOf(t, 4)
	s, err := pgstore.New(pool, pgstore.StatementTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var running, most atomic.Int32
	email := handler.Func(func(ctx context.Context, job *handler.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if err := send(ctx, job); err != nil { // the claim's transaction
			return err
		}
		time.Sleep(100 * time.Millisecond) // renders the message: every claim is in by now
		var template int
		if err := pool.QueryRow(ctx, "SELECT 1").Scan(&template); err != nil {
			return fmt.Errorf("read the template: %w", err)
		}
		_, err := pool.Exec(ctx, "INSERT INTO send_slots (job) VALUES ($1)", job.ID())
		return err
	})
	h := middleware(t, s)(email)
	l := newLogged()
	// Longer than the stall lasted in the trial before the worker gave up
	// on the jobs; the jobs take a second together.
	ctx, cancel := context.WithTimeout(handler.WithLogger(t.Context(), l.log), 30*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, jobs)
	for i := range jobs {
		wg.Go(func() { errs[i] = h.Handle(ctx, testJob(fmt.Sprintf("email-%d", i))) })
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Errorf("job %d: %v (unavailable: %v)", i, err, handler.IsUnavailable(err))
		}
	}
	if t.Failed() {
		t.Fatalf("the jobs stalled: they ended after %v", took)
	}
	if n := count(t, pool, "SELECT count(*) FROM sends"); n != jobs {
		t.Fatalf("%d jobs wrote through their claims, want %d", n, jobs)
	}
	if n := count(t, pool, "SELECT count(*) FROM send_slots"); n != jobs {
		t.Fatalf("%d jobs wrote through the pool, want %d", n, jobs)
	}
	if m := most.Load(); m != 3 {
		t.Fatalf("%d claims held a connection at once, want 3 (the pool's 4 less one for the handlers)", m)
	}
	t.Logf("%d jobs on a pool of 4 connections: all done in %v, at most %d claims at once", jobs, took.Round(time.Millisecond), most.Load())
}

// Claims that wait for a connection past StatementTimeout because the
// application holds every connection of the pool are not an outage: they
// wait (under the job's context), one Warn line names the pool's numbers
// and the fix, and one Info line says when they got connections, for
// three claims at once; then they all claim.
func TestExhaustedPoolIsStarvationNotOutage(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	pool := poolOf(t, 2)
	s, err := pgstore.New(pool, pgstore.StatementTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	var held []*pgxpool.Conn
	for range 2 {
		c, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		t.Cleanup(c.Release) // before the pool's Close, also when the test fails
	}
	l := newLogged()
	ctx := handler.WithLogger(t.Context(), l.log)
	h := middleware(t, s)(handler.Func(send))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	var ended atomic.Int32
	for i := range errs {
		wg.Go(func() {
			defer ended.Add(1)
			errs[i] = h.Handle(ctx, testJob(fmt.Sprintf("starved-%d", i)))
		})
	}
	waitFor(t, "starvation warning", func() bool {
		return len(l.lines(t, slog.LevelWarn, starvedWarn)) > 0 || ended.Load() > 0
	})
	// Every claim waits past StatementTimeout before the application
	// lets go: the claim that passed its slot for a connection, the two
	// others for a slot.
	time.Sleep(time.Until(start.Add(3 * d)))
	for _, c := range held {
		c.Release()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("claim %d on an exhausted pool: %v (unavailable: %v), want it to wait and claim", i, err, handler.IsUnavailable(err))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if n := count(t, pool, "SELECT count(*) FROM sends"); n != 3 {
		t.Fatalf("%d claims wrote, want 3", n)
	}
	warns, infos := l.lines(t, slog.LevelWarn, starvedWarn), l.lines(t, slog.LevelInfo, fedInfo)
	if len(warns) != 1 || len(infos) != 1 {
		t.Fatalf("%d starvation warnings and %d infos for one episode, want 1 and 1:\n%s", len(warns), len(infos), l.buf.String())
	}
	w := warns[0]
	for k, want := range map[string]any{"pool_size": 2.0, "pool_in_use": 2.0, "held_by_claims": 0.0} {
		if w[k] != want {
			t.Errorf("warning's %s = %v, want %v: %v", k, w[k], want, w)
		}
	}
	if fix, _ := w["fix"].(string); !strings.Contains(fix, "cfg.MaxConns") || !strings.Contains(w["msg"].(string), "not a Postgres outage") {
		t.Errorf("warning does not say it is no outage and how to size the pool: %v", w)
	}
	if infos[0]["waits"] != 3.0 {
		t.Errorf("info's waits = %v, want 3 (every claim waited past StatementTimeout): %v", infos[0]["waits"], infos[0])
	}
	t.Logf("warning: %v", w)
	t.Logf("info: %v", infos[0])
}

// A handler's statement that runs past StatementTimeout while the pool is
// exhausted (its claim holds one connection, the application the other):
// the store's probe cannot take a connection from the pool, asks Postgres
// on a connection of its own, gets an answer, and leaves the statement to
// finish; it used to take the full pool for a silent Postgres.
func TestProbeOnExhaustedPoolIsNotOutage(t *testing.T) {
	t.Parallel()
	// d covers the probe's own connection, made while the pool is
	// exhausted (StatementTimeout's doc: keep d well above the time a
	// connection takes): a TLS connection with SCRAM on a busy CI host
	// took more than 300 ms.
	const d = time.Second
	pool := poolOf(t, 2)
	s, err := pgstore.New(pool, pgstore.StatementTimeout(d))
	if err != nil {
		t.Fatal(err)
	}
	l := newLogged()
	ctx := handler.WithLogger(t.Context(), l.log)
	claimed, err := s.Claim(ctx, "slow", func(ctx context.Context) error {
		other, err := pool.Acquire(ctx) // the pool's last connection
		if err != nil {
			return err
		}
		defer other.Release()
		var v int
		return pgstore.Tx(ctx).QueryRow(ctx, "SELECT 1 FROM pg_sleep($1)", (2 * d).Seconds()).Scan(&v)
	})
	if err != nil || !claimed {
		t.Fatalf("Claim with a slow statement on an exhausted pool = %v, %v (unavailable: %v); want claimed", claimed, err, handler.IsUnavailable(err))
	}
	if len(l.lines(t, slog.LevelWarn, starvedWarn)) != 1 || len(l.lines(t, slog.LevelInfo, fedInfo)) != 1 {
		t.Fatalf("want one starvation warning and one info:\n%s", l.buf.String())
	}
}

// The network to Postgres goes silent under a handler's statement while
// the application holds the pool's other connection: the probe finds the
// pool exhausted, asks on a connection of its own, gets no answer either,
// and the claim is unavailable, as for a pool with connections to spare.
func TestSilentPostgresOnExhaustedPoolIsUnavailable(t *testing.T) {
	t.Parallel()
	const d = 500 * time.Millisecond
	s, px, _, pool := proxiedPool(t, 2, pgstore.StatementTimeout(d))
	other, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	_, err, took := claimWithin(t, s, "silent", 20*d, func(ctx context.Context) error {
		px.Silence()
		_, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1")
		return err
	})
	wantSilent(t, "handler's statement through a silent network, the pool exhausted", err)
	t.Logf("unavailable after %v (StatementTimeout %v)", took.Round(time.Millisecond), d)
	px.Resume()
}

func TestCheckConcurrency(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4)
	s, err := pgstore.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		if err := s.CheckConcurrency(n); err != nil {
			t.Errorf("CheckConcurrency(%d) with 4 connections: %v, want nil", n, err)
		}
	}
	for n, wants := range map[int][]string{
		4:  {"pool has 4 connections", "runs 4 jobs at once", "at most 3 of them", "cfg.MaxConns", "at least 5"},
		10: {"pool has 4 connections", "runs 10 jobs at once", "at most 3 of them", "cfg.MaxConns", "at least 11"},
	} {
		err := s.CheckConcurrency(n)
		if err == nil {
			t.Fatalf("CheckConcurrency(%d) with 4 connections: nil, want an error", n)
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("CheckConcurrency(%d) = %q, lacks %q", n, err, want)
			}
		}
	}
	one, err := pgstore.New(nopDB{})
	if err != nil {
		t.Fatal(err)
	}
	if err := one.CheckConcurrency(100); err != nil {
		t.Errorf("CheckConcurrency of a store whose DB is not a pool: %v, want nil", err)
	}
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
	}
}
