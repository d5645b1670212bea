package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shareq/shareq/handler"
)

// StatementTimeoutDefault is the [StatementTimeout] of a [Store] made
// without one.
const StatementTimeoutDefault = 10 * time.Second

// StatementTimeout bounds how long a claim waits for an answer from
// Postgres before it takes Postgres for unreachable, so that a network
// that goes silent (packets dropped, no reset: a firewall, a partition)
// pauses the worker like an outage, within seconds, instead of holding
// the job until its context ends and then spending its delivery.
//
// The BEGIN and the COMMIT of a claim are given d; without an answer the
// claim fails with a [handler.UnavailableError] of [Dependency] (for the
// COMMIT, with an unknown outcome, as for a connection lost during it:
// see [Store.Claim]). With a [DB] that is not a pool (see the package
// documentation), d also covers the wait for a connection and its making:
// keep d well above the time a connection takes.
//
// What may be slow on its own is not cut at d: the wait of a claim on a
// pool for a connection (a full pool, or one being made or pinged), the
// claim's INSERT, which waits for an unfinished claim of the same key in
// another transaction, and the handler's Exec and QueryRow on the claim's
// transaction (see [Tx]). After d without an answer the store asks
// Postgres for SELECT 1 on another connection, bounded by d too, and only
// when that gets no answer either is the wait or the statement abandoned
// as unavailable (pgx closes a statement's connection). The probe takes a
// connection of the pool while one is free; when the pool is exhausted
// (every connection taken, by claims, handlers or the rest of the
// application), it connects on its own with the pool's configuration,
// so that a full pool is not taken for a silent Postgres, and the store
// reports the starvation (see the package documentation). Query,
// SendBatch and CopyFrom on the claim's transaction are bounded by the
// job's context alone, and so is a claim's wait for its turn on a pool.
//
// Default [StatementTimeoutDefault]; StatementTimeout(0) turns the bound
// and the probe off (a claim that waits for its turn on the pool past
// StatementTimeoutDefault is still reported). d must not be negative.
func StatementTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// silentError is the cause of a statement the store abandoned.
type silentError struct {
	what  string
	after time.Duration
}

func (e *silentError) Error() string {
	return fmt.Sprintf("postgres did not answer %s within %v (network silent or server hung)", e.what, e.after)
}

// bounded runs fn, a statement that never waits on other transactions
// (BEGIN, COMMIT), with s.timeout: without an answer it is an outage.
func (s *Store) bounded(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if s.timeout <= 0 {
		return fn(ctx)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, s.timeout, &silentError{what: what, after: s.timeout})
	defer cancel()
	return s.abandoned(ctx, bctx, fn(bctx))
}

// watched runs fn, a statement that may legitimately take long (it waits
// for a lock, or is the handler's own, or waits for a connection of the
// pool), and probes Postgres once fn has gone s.timeout without an
// answer: fn is abandoned only when the probe gets no answer either. A
// probe that finds the pool exhausted starts a starvation episode (see
// [starvation]) that lasts until fn answers.
func (s *Store) watched(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	if s.timeout <= 0 {
		return fn(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// actx ends when fn answers (or ctx ends): it stops the wait and a
	// probe in flight.
	actx, answer := context.WithCancel(ctx)
	probed := make(chan struct{})
	fed := func() {} // written by the probe before probed closes
	go func() {
		defer close(probed)
		t := time.NewTimer(s.timeout)
		defer t.Stop()
		select {
		case <-actx.Done():
			return
		case <-t.C:
		}
		exhausted, down := s.probe(actx)
		if exhausted && !down && actx.Err() == nil {
			fed = s.starving(ctx)
		}
		if down {
			cancel(&silentError{what: what, after: s.timeout})
		}
	}()
	err := fn(wctx)
	answer()
	<-probed
	fed()
	return s.abandoned(ctx, wctx, err)
}

// probe asks Postgres for SELECT 1 on another connection than the
// statement's, within s.timeout, and reports whether Postgres is down
// (the probe failed as in an outage, or got no answer in time; never once
// ctx is done) and whether it found the pool exhausted. It asks through
// the DB while the pool has a connection to spare; when it has none
// (claims, handlers and the rest of the application hold them all), on a
// connection of its own made with the pool's configuration, so that a
// full pool is not taken for a silent Postgres.
func (s *Store) probe(ctx context.Context) (exhausted, down bool) {
	ask := func(ping func(ctx context.Context) error) bool {
		pctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		err := ping(pctx)
		return err != nil && ctx.Err() == nil && (outage(err) || pctx.Err() != nil)
	}
	viaDB := func(ctx context.Context) error {
		_, err := s.db.Exec(ctx, "SELECT 1")
		return err
	}
	if s.pool == nil {
		return false, ask(viaDB)
	}
	if !s.exhausted() {
		down = ask(viaDB)
		if !down || !s.exhausted() {
			return false, down
		}
		// The pool filled up while the probe waited for a connection.
	}
	return true, ask(s.pingAlone)
}

// abandoned turns err, the error of a statement run in sctx (derived from
// ctx), into an outage when the store cancelled sctx for want of an
// answer.
func (s *Store) abandoned(ctx, sctx context.Context, err error) error {
	var silent *silentError
	if err == nil || ctx.Err() != nil || !errors.As(context.Cause(sctx), &silent) {
		return err
	}
	return handler.Unavailable(Dependency, fmt.Errorf("%w: %w", silent, err))
}

// watchedTx is the claim's transaction as the handler gets it: its Exec
// and QueryRow are [Store.watched].
type watchedTx struct {
	pgx.Tx
	s *Store
}

func (t watchedTx) Exec(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
	err = t.s.watched(ctx, "a statement", func(ctx context.Context) error {
		tag, err = t.Tx.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// QueryRow runs the query when the row is scanned, so that the watch
// covers the wait for its answer.
func (t watchedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return watchedRow{t: t, ctx: ctx, sql: sql, args: args}
}

type watchedRow struct {
	t    watchedTx
	ctx  context.Context
	sql  string
	args []any
}

func (r watchedRow) Scan(dest ...any) error {
	return r.t.s.watched(r.ctx, "a query", func(ctx context.Context) error {
		return r.t.Tx.QueryRow(ctx, r.sql, r.args...).Scan(dest...)
	})
}
