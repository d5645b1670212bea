package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
)

// pool is what the store uses of a *pgxpool.Pool beyond [DB]: taking a
// connection itself (so that the wait for one is told from a BEGIN that
// gets no answer), the pool's size and use, and its configuration for a
// probe on a connection of its own.
type pool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
	Stat() *pgxpool.Stat
	Config() *pgxpool.Config
}

// claimSlots keeps the claims of a Store from holding every connection of
// its pool: a claim takes a slot before its connection and gives it back
// after its transaction ended.
type claimSlots struct {
	slots   chan struct{} // a slot per claim that may hold a connection: MaxConns-1, at least 1
	holding atomic.Int32  // claims that hold a connection
	waiting atomic.Int32  // claims waiting for a slot or a connection
	starved starvation
}

// newClaimSlots returns the claim slots for p: one connection fewer than
// p has, and at least one.
func newClaimSlots(p pool) *claimSlots {
	return &claimSlots{slots: make(chan struct{}, max(1, p.Stat().MaxConns()-1))}
}

// begin begins the transaction of a claim (what names it in errors:
// claim "key"): on a connection taken
// within a claim slot when the store's DB is a pool, else with DB.Begin.
// The BEGIN is [Store.bounded]; the wait for a slot is not (it lasts as
// long as claims on the pool's other connections run), nor is the wait for
// a connection, which is [Store.watched] (a connection being made, or an
// idle one pinged, that gets no answer is an outage; a full pool is not).
// The caller calls release after the transaction ended.
func (s *Store) begin(ctx context.Context, what string) (tx pgx.Tx, release func(), err error) {
	if s.pool == nil {
		err = s.bounded(ctx, "BEGIN", func(ctx context.Context) (err error) {
			tx, err = s.db.Begin(ctx)
			return err
		})
		if err != nil {
			return nil, nil, unavailable(ctx, nil, fmt.Errorf("pgstore: %s: begin: %w", what, err))
		}
		return tx, func() {}, nil
	}
	leave, err := s.takeSlot(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: %s: waiting for a connection: %w", what, err)
	}
	conn, err := s.acquire(ctx)
	if err != nil {
		leave()
		return nil, nil, unavailable(ctx, nil, fmt.Errorf("pgstore: %s: connection: %w", what, err))
	}
	s.claims.holding.Add(1)
	release = func() {
		conn.Release()
		s.claims.holding.Add(-1)
		leave()
	}
	err = s.bounded(ctx, "BEGIN", func(ctx context.Context) (err error) {
		tx, err = conn.Begin(ctx)
		return err
	})
	if err != nil {
		release()
		return nil, nil, unavailable(ctx, nil, fmt.Errorf("pgstore: %s: begin: %w", what, err))
	}
	return tx, release, nil
}

// takeSlot waits for a claim slot, under ctx alone (the worker renews the
// job's lock meanwhile), and returns the func that gives it back. A wait
// past the store's StatementTimeout is starvation (see [starvation]).
func (s *Store) takeSlot(ctx context.Context) (leave func(), err error) {
	c := s.claims
	leave = func() { <-c.slots }
	select {
	case c.slots <- struct{}{}:
		return leave, nil
	default:
	}
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	t := time.NewTimer(s.starveAfter())
	defer t.Stop()
	end := func() {}
	defer func() { end() }()
	for {
		select {
		case c.slots <- struct{}{}:
			return leave, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-t.C:
			end = s.starving(ctx)
		}
	}
}

// acquire takes a connection from the pool, [Store.watched]: a wait past
// StatementTimeout probes Postgres, and only a probe without an answer
// abandons it as an outage.
func (s *Store) acquire(ctx context.Context) (conn *pgxpool.Conn, err error) {
	c := s.claims
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	err = s.watched(ctx, "a connection of the pool (connect or ping)", func(ctx context.Context) (err error) {
		conn, err = s.pool.Acquire(ctx)
		return err
	})
	return conn, err
}

// exhausted reports whether every connection of the store's pool is
// taken (or being made for a caller), so that a caller of Acquire waits.
func (s *Store) exhausted() bool {
	st := s.pool.Stat()
	return st.AcquiredConns()+st.ConstructingConns() >= st.MaxConns()
}

// starveAfter is how long a claim waits for a connection before the store
// reports starvation: StatementTimeout, or its default when the bound is
// off.
func (s *Store) starveAfter() time.Duration {
	return cmp.Or(s.timeout, StatementTimeoutDefault)
}

// starvation is an episode of claims waiting for connections: it begins
// when a claim (or the store's probe) has waited past StatementTimeout for
// one, with one Warn line, and ends when no such wait is left, with one
// Info line. Both go to the logger of the job's context (handler.Logger;
// the worker puts its own there).
type starvation struct {
	mu      sync.Mutex
	waits   int       // waits past StatementTimeout going on now
	since   time.Time // when the episode began
	episode int       // waits past StatementTimeout in this episode
}

// starving notes a wait for a connection that has gone past
// StatementTimeout, logging the start of an episode, and returns the func
// that notes the wait's end.
func (s *Store) starving(ctx context.Context) (end func()) {
	st := &s.claims.starved
	st.mu.Lock()
	defer st.mu.Unlock()
	st.waits++
	st.episode++
	if st.waits == 1 {
		st.since = time.Now()
		p := s.pool.Stat()
		handler.Logger(ctx).Warn("pgstore: claims wait for Postgres connections: the pool is too small for the jobs that claim through it (not a Postgres outage: Postgres answers)",
			"pool_size", p.MaxConns(), "pool_in_use", p.AcquiredConns(),
			"held_by_claims", s.claims.holding.Load(), "claims_waiting", s.claims.waiting.Load(),
			"waited", s.starveAfter(),
			"fix", "size the pool for the worker's concurrency plus the connections handlers and the rest of the application use at once: cfg, err := pgxpool.ParseConfig(url); cfg.MaxConns = concurrency + N; pgxpool.NewWithConfig(ctx, cfg)")
	}
	var once sync.Once
	return func() { once.Do(func() { s.fed(ctx) }) }
}

// fed notes the end of a wait that starving noted, logging the end of the
// episode when it was the last.
func (s *Store) fed(ctx context.Context) {
	st := &s.claims.starved
	st.mu.Lock()
	defer st.mu.Unlock()
	st.waits--
	if st.waits > 0 {
		return
	}
	handler.Logger(ctx).Info("pgstore: claims get Postgres connections again",
		"starved_for", time.Since(st.since).Round(time.Millisecond), "waits", st.episode)
	st.episode = 0
}

// CheckConcurrency returns an error that says so when the store's pool is
// too small for a worker that runs concurrency jobs at once through the
// store, and nil when it is not, or when the store's [DB] is not a pool.
// The worker calls it at start (worker.ConcurrencyChecker, through the
// handlers of idempotency.Middleware) and logs the error at Warn level.
//
// A pool of n connections lets n-1 claims hold one at a time (see the
// package documentation): with a concurrency of n-1 or more, some jobs wait
// for a claim, their handler slots taken but idle. Add up the worker's
// concurrency of every worker that shares the pool when there are several.
func (s *Store) CheckConcurrency(concurrency int) error {
	if s.pool == nil {
		return nil
	}
	n := int(s.pool.Stat().MaxConns())
	if concurrency < n {
		return nil
	}
	free := "one connection stays free for the handlers' own queries"
	if n == 1 {
		free = "none is left for the handlers' own queries: a handler that queries the pool besides pgstore.Tx waits until its job's context ends"
	}
	return fmt.Errorf("pgstore: the pool has %d connections for a worker that runs %d jobs at once: at most %d of them hold a claim at a time "+
		"(%s), the others wait for a connection; "+
		"set cfg.MaxConns (cfg, err := pgxpool.ParseConfig(url)) to the worker's concurrency plus the connections handlers and the rest of the application use at once: at least %d",
		n, concurrency, cap(s.claims.slots), free, concurrency+1)
}

// pingAlone runs SELECT 1 on a connection of its own, made with the
// pool's configuration (and its BeforeConnect hook), and closes it.
func (s *Store) pingAlone(ctx context.Context) error {
	cfg := s.pool.Config()
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cfg.ConnConfig); err != nil {
			return err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}
