package pgoutbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// enqueueJob commits one job with opts and returns its result.
func enqueueJob(t *testing.T, pool *pgxpool.Pool, job enqueue.Job, opts ...Option) Result {
	t.Helper()
	var res Result
	inTx(t, pool, func(tx pgx.Tx) {
		var err error
		if res, err = EnqueueJobTx(t.Context(), tx, job, opts...); err != nil {
			t.Fatal(err)
		}
	})
	return res
}

// dbNow is Postgres's clock.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(t.Context(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// jobNs returns the N values of recs, in order.
func jobNs(t *testing.T, recs []*kgo.Record) []int {
	t.Helper()
	var ns []int
	for _, r := range recs {
		var w welcome
		if err := json.Unmarshal(r.Value, &w); err != nil {
			t.Fatal(err)
		}
		ns = append(ns, w.N)
	}
	return ns
}

// waitLocked waits until the backend pid waits for a lock.
func waitLocked(t *testing.T, pool *pgxpool.Pool, pid uint32, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		var waiting bool
		err := pool.QueryRow(t.Context(), "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	})
}

// A job that falls due while a round is producing others was not in that
// round's claim; the relay runs the next round at once for it, rather
// than at its next poll (an hour here).
func TestJobDueDuringARoundIsRelayedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	r := b.relay(t, PollInterval(time.Hour))
	soonID := enqueue.NewID()
	var held atomic.Bool
	r.afterProduce = func() error {
		if held.Swap(true) {
			return nil
		}
		// Hold the first round that produced until the second job is due.
		deadline := time.Now().Add(waitTimeout)
		for time.Now().Before(deadline) {
			var due bool
			if err := b.pool.QueryRow(context.Background(), "SELECT now() >= due_at FROM "+Table+" WHERE job_id = $1", soonID).Scan(&due); err == nil && due {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	run(t, r)
	waitFor(t, "the relay to listen", r.listening.Load)
	// The first round and the one the listening connection wakes; after
	// them nothing wakes the relay but a commit's notification or a due
	// time.
	waitFor(t, "the relay's first rounds", func() bool { return r.Stats().Rounds >= 2 })

	inTx(t, b.pool, func(tx pgx.Tx) {
		for _, j := range []struct {
			job  enqueue.Job
			opts []Option
		}{
			{enqueue.NewJob(b.topic, welcome{User: "now"}), nil},
			{enqueue.NewJob(b.topic, welcome{User: "soon"}, enqueue.ID(soonID)), []Option{In(500 * time.Millisecond)}},
		} {
			if _, err := EnqueueJobTx(t.Context(), tx, j.job, j.opts...); err != nil {
				t.Fatal(err)
			}
		}
	})
	waitFor(t, "both jobs to be relayed", func() bool { return r.Stats().Produced == 2 })
	if !held.Load() {
		t.Fatal("no round was held")
	}
}

// A job for later stays in the outbox while it is not due, through the
// relay's rounds, and the relay, which polls once an hour, wakes for it
// by itself (a timer to its due time, armed when the notification of its
// commit woke the relay) and produces it at once.
func TestScheduledJobWaitsAndTheRelayWakesForIt(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	r := b.relay(t, PollInterval(time.Hour))
	run(t, r)
	waitFor(t, "the relay to listen", r.listening.Load)

	later := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "later", N: 1}), In(time.Hour))
	now := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "now", N: 2}))
	waitFor(t, "the immediate job", func() bool { s := r.Stats(); return s.Produced == 1 && s.DueDelayCount == 1 })
	before := r.Stats()
	rounds := before.Rounds
	if got := enqueue.RecordID(b.cluster.Consume(t, b.topic, 1)[0]); got != now.ID {
		t.Fatalf("relayed %s first, want the immediate job %s", got, now.ID)
	}

	soon := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "soon", N: 3}), In(1500*time.Millisecond))
	var due time.Time
	if err := b.pool.QueryRow(t.Context(), "SELECT due_at FROM "+Table+" WHERE job_id = $1", soon.ID).Scan(&due); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the round its notification causes", func() bool { return r.Stats().Rounds > rounds })
	if dbNow(t, b.pool).Before(due) {
		if s := r.Stats(); s.Produced != 1 {
			t.Fatalf("produced %d jobs before the scheduled one was due, want 1", s.Produced)
		}
	} else {
		t.Logf("the notified round came after the due time; only the delay is checked")
	}
	recs := b.cluster.Consume(t, b.topic, 2)
	if got := enqueue.RecordID(recs[1]); got != soon.ID {
		t.Fatalf("second record %s, want the scheduled job %s", got, soon.ID)
	}
	waitFor(t, "the relay's stats", func() bool { return r.Stats().DueDelayCount == before.DueDelayCount+1 })
	after := r.Stats()
	delay := after.DueDelay - before.DueDelay
	// Produced after its due time (the claim takes due rows only), and
	// long before the next poll: the timer woke the relay.
	if delay < 0 || delay > 5*time.Second {
		t.Fatalf("due -> produced %v, want within the relay's wake-up (poll interval 1h)", delay)
	}
	t.Logf("due -> produced: %v", delay)

	bl, err := r.Backlog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bl.Rows != 1 || bl.Scheduled != 1 || bl.OldestAge != 0 {
		t.Fatalf("backlog = %+v, want the job due in an hour, scheduled and not ageing", bl)
	}
	var n int64
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+Table+" WHERE job_id = $1", later.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the job due in an hour: %d rows (%v), want it waiting", n, err)
	}
}

// Due rows go in due order, ties in insertion order; per key too. A row
// of a key scheduled later does not hold back a row of its key enqueued
// after it but due earlier.
func TestDueOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	base := dbNow(t, b.pool).Add(-time.Hour)
	k := enqueue.Key([]byte("k"))
	// Enqueued in this order; due in the order of N.
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 100}), In(time.Hour)) // not due in the test
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 4}, k), At(base.Add(4*time.Second)))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 101}, k), In(time.Hour))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "x", N: 2}), At(base.Add(2*time.Second)))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 1}, k), At(base.Add(time.Second)))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 5}, k), At(base.Add(4*time.Second)))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 3}, k), At(base.Add(3*time.Second)))
	enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{User: "k", N: 6}, k)) // immediate: due now
	r := b.relay(t, BatchSize(2))
	run(t, r)
	recs := b.cluster.Consume(t, b.topic, 6)
	if got, want := jobNs(t, recs), []int{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("produced in order %v, want due order %v", got, want)
	}
	// The records are on Kafka before the relay's delete of their rows
	// commits; Produced counts them after it.
	waitFor(t, "the relay to commit the 6 rows produced", func() bool { return r.Stats().Produced == 6 })
	if n := rowCount(t, b.pool); n != 2 {
		t.Fatalf("%d rows left, want the 2 due in an hour", n)
	}
}

// A relay stopped while scheduled jobs come due, and another started
// after it: every job is produced once.
func TestRelayRestartWithScheduledJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	const n = 40
	var ids []string
	inTx(t, b.pool, func(tx pgx.Tx) {
		for i := range n {
			res, err := EnqueueJobTx(t.Context(), tx, enqueue.NewJob(b.topic, welcome{N: i}), In(time.Duration(i)*100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
	})
	first := b.relay(t, BatchSize(3))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	waitFor(t, "the first relay to produce some", func() bool { return first.Stats().Produced >= 5 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	left := rowCount(t, b.pool)
	if left == 0 || left+int64(first.Stats().Produced) != n {
		t.Fatalf("after the stop: %d produced, %d rows left; want some left and none lost", first.Stats().Produced, left)
	}
	second := b.relay(t, BatchSize(3))
	run(t, second)
	waitFor(t, "the second relay to produce the rest", func() bool { return rowCount(t, b.pool) == 0 })
	checkOnce(t, b, ids)
}

// checkOnce fails t unless the topic holds each of ids exactly once.
func checkOnce(t *testing.T, b *bundle, ids []string) {
	t.Helper()
	if got := total(t, b.cluster, b.topic); got != int64(len(ids)) {
		t.Fatalf("%d records, want %d: each job once", got, len(ids))
	}
	var got []string
	for _, rec := range b.cluster.Consume(t, b.topic, len(ids)) {
		got = append(got, enqueue.RecordID(rec))
	}
	slices.Sort(got)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatal("the produced job IDs are not the enqueued ones")
	}
}

// Two relays and many scheduled rows, of a few keys, coming due over a
// second: each is produced once, in due order per key.
func TestTwoRelaysScheduledRowsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	r1, r2 := b.relay(t, BatchSize(10)), b.relay(t, BatchSize(10))
	run(t, r1)
	run(t, r2)
	const n = 400
	var ids []string
	base := dbNow(t, b.pool).Add(200 * time.Millisecond)
	inTx(t, b.pool, func(tx pgx.Tx) {
		for i := range n {
			user := strconv.Itoa(i % 7)
			// N grows with the due time; (i*37)%n is a permutation, so
			// rows are not inserted in due order.
			delay := time.Duration((i*37)%n) * 2500 * time.Microsecond
			res, err := EnqueueJobTx(t.Context(), tx, enqueue.NewJob(b.topic, welcome{User: user, N: int(delay)}, enqueue.Key([]byte(user))), At(base.Add(delay)))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
	})
	waitFor(t, "every row to be produced", func() bool { return rowCount(t, b.pool) == 0 })
	checkOnce(t, b, ids)
	checkOrderPerKey(t, b.cluster.Consume(t, b.topic, n))
	if s1, s2 := r1.Stats(), r2.Stats(); s1.Produced+s2.Produced != n {
		t.Fatalf("relays produced %d + %d, want %d", s1.Produced, s2.Produced, n)
	}
}

// 50 concurrent transactions enqueue one unique key: one row, and every
// transaction gets the first job's ID.
func TestUniqueConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	cfg, err := pgxpool.ParseConfig(pgtest.SchemaURL(t, b.schema))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 50
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const n = 50
	var ready, wg sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	results := make([]Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tx, err := pool.Begin(t.Context())
			ready.Done()
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			<-start
			results[i], errs[i] = EnqueueJobTx(t.Context(), tx, enqueue.NewJob(b.topic, welcome{N: i}), Unique("signup/ada"))
			if errs[i] == nil {
				errs[i] = tx.Commit(t.Context())
			}
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	var first string
	dups := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("transaction %d: %v", i, errs[i])
		}
		if !results[i].Duplicate {
			if first != "" {
				t.Fatalf("two transactions hold the key: %s and %s", first, results[i].ID)
			}
			first = results[i].ID
		} else {
			dups++
		}
	}
	for i := range n {
		if results[i].ID != first {
			t.Fatalf("transaction %d got %s, want the first job's ID %s", i, results[i].ID, first)
		}
	}
	if dups != n-1 || rowCount(t, b.pool) != 1 {
		t.Fatalf("%d duplicates, %d rows; want %d and 1", dups, rowCount(t, b.pool), n-1)
	}
}

// A second enqueue of a key waits for the transaction that holds it: its
// rollback gives the key to the second.
func TestUniqueWaitsForAnUncommittedHolder(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	tx1, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(context.Background()) }()
	if _, err := EnqueueJobTx(t.Context(), tx1, enqueue.NewJob(b.topic, "first"), Unique("k")); err != nil {
		t.Fatal(err)
	}
	conn, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	second := make(chan Result, 1)
	go func() {
		var res Result
		err := pgx.BeginFunc(context.Background(), conn, func(tx pgx.Tx) error {
			var err error
			res, err = EnqueueJobTx(context.Background(), tx, enqueue.NewJob(b.topic, "second"), Unique("k"))
			return err
		})
		if err != nil {
			t.Error(err)
		}
		second <- res
	}()
	waitLocked(t, b.pool, conn.Conn().PgConn().PID(), "the second enqueue to wait on the key")
	if err := tx1.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	res := <-second
	if res.Duplicate || res.ID == "" {
		t.Fatalf("second enqueue after the holder rolled back = %+v, want it to hold the key", res)
	}
	if n := rowCount(t, b.pool); n != 1 {
		t.Fatalf("%d rows, want the second job's", n)
	}
}

// Unique holds the key while the job waits; UniqueFor for its period
// after the produce too, and then the key can be used again; the relay
// sweeps expired keys.
func TestUniqueKeyLifetime(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	r := b.relay(t)
	r.sweepEvery = 0
	const period = time.Second
	first := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "a"), UniqueFor("report/1", period), In(time.Hour))
	if first.Duplicate {
		t.Fatal("the first job is a duplicate")
	}
	dup := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "b"), UniqueFor("report/1", period))
	if !dup.Duplicate || dup.ID != first.ID {
		t.Fatalf("second enqueue while the first waits = %+v, want a duplicate of %s", dup, first.ID)
	}
	plain := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "c"), Unique("plain/1"))
	if dup := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "d"), Unique("plain/1")); !dup.Duplicate || dup.ID != plain.ID {
		t.Fatalf("second Unique enqueue = %+v, want a duplicate of %s", dup, plain.ID)
	}
	// Make the first due now, and let the relay produce both.
	if _, err := b.pool.Exec(t.Context(), "UPDATE "+Table+" SET due_at = now(), next_attempt_at = now() WHERE job_id = $1", first.ID); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, "both jobs produced", func() bool { return r.Stats().Produced == 2 })
	if again := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "e"), Unique("plain/1")); again.Duplicate {
		t.Fatalf("Unique key after its job was produced = %+v, want it free", again)
	}
	var expires time.Time
	if err := b.pool.QueryRow(t.Context(), "SELECT expires_at FROM "+UniqueTable+" WHERE key = 'report/1'").Scan(&expires); err != nil {
		t.Fatal(err)
	}
	if dbNow(t, b.pool).Before(expires) {
		if dup := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "f"), UniqueFor("report/1", period)); !dup.Duplicate || dup.ID != first.ID {
			t.Fatalf("enqueue within the period after the produce = %+v, want a duplicate of %s", dup, first.ID)
		}
	}
	waitFor(t, "the period to end", func() bool { return !dbNow(t, b.pool).Before(expires) })
	// The relay sweeps the expired key (it runs a round every poll).
	waitFor(t, "the sweep of the expired key", func() bool {
		var n int64
		err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+UniqueTable+" WHERE key = 'report/1'").Scan(&n)
		return err == nil && n == 0
	})
	again := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "g"), UniqueFor("report/1", period))
	if again.Duplicate || again.ID == first.ID {
		t.Fatalf("enqueue after the period = %+v, want a new job", again)
	}
}

// An expired key not yet swept is taken over by the next enqueue.
func TestUniqueExpiredKeyIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	old := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "a"), Unique("k"))
	// As the relay leaves it after the produce, with a period that has
	// ended.
	if _, err := b.pool.Exec(t.Context(), "DELETE FROM "+Table+"; UPDATE "+UniqueTable+" SET expires_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	res := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "b"), Unique("k"))
	if res.Duplicate || res.ID == old.ID {
		t.Fatalf("enqueue over an expired key = %+v, want a new job", res)
	}
	var holder string
	if err := b.pool.QueryRow(t.Context(), "SELECT job_id FROM "+UniqueTable+" WHERE key = 'k' AND expires_at IS NULL").Scan(&holder); err != nil || holder != res.ID {
		t.Fatalf("key holder %q (%v), want %s waiting", holder, err, res.ID)
	}
}

// Cancel withdraws a waiting job (nothing produced), frees its unique
// key, says produced for a produced job and unknown for others.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	later := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{N: 1}), In(time.Hour), Unique("reminder/1"))
	now := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{N: 2}))
	if res, err := Cancel(t.Context(), b.pool, later.ID); err != nil || res != CancelWithdrawn {
		t.Fatalf("Cancel(waiting job) = %v, %v; want withdrawn", res, err)
	}
	if res := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, welcome{N: 3}), In(time.Hour), Unique("reminder/1")); res.Duplicate {
		t.Fatalf("Unique key of a cancelled job = %+v, want it free", res)
	}
	r := b.relay(t)
	run(t, r)
	waitFor(t, "the immediate job", func() bool { return r.Stats().Produced == 1 })
	if res, err := Cancel(t.Context(), b.pool, now.ID); err != nil || res != CancelProduced {
		t.Fatalf("Cancel(produced job) = %v, %v; want produced", res, err)
	}
	if res, err := Cancel(t.Context(), b.pool, later.ID); err != nil || res != CancelUnknown {
		t.Fatalf("Cancel(cancelled job) again = %v, %v; want unknown", res, err)
	}
	if res, err := Cancel(t.Context(), b.pool, "no-such-job"); err != nil || res != CancelUnknown {
		t.Fatalf("Cancel(unknown ID) = %v, %v; want unknown", res, err)
	}
	recs := b.cluster.Consume(t, b.topic, 1)
	if got := enqueue.RecordID(recs[0]); got != now.ID || total(t, b.cluster, b.topic) != 1 {
		t.Fatalf("topic has %d records, first %s; want only %s: a cancelled job is never produced", total(t, b.cluster, b.topic), got, now.ID)
	}
	// Inside the caller's transaction, a cancel rolled back withdraws
	// nothing.
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var waiting string
	if err := tx.QueryRow(t.Context(), "SELECT job_id FROM "+Table).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if res, err := CancelTx(t.Context(), tx, waiting); err != nil || res != CancelWithdrawn {
		t.Fatalf("CancelTx = %v, %v", res, err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, b.pool); n != 1 {
		t.Fatalf("%d rows after a rolled-back cancel, want the job still waiting", n)
	}
}

// With ProducedRetention(0) the relay records no produced IDs, and the
// sweep deletes those past the retention.
func TestProducedRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	r := b.relay(t, ProducedRetention(0))
	run(t, r)
	res := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "x"))
	waitFor(t, "the job", func() bool { return r.Stats().Produced == 1 })
	if c, err := Cancel(t.Context(), b.pool, res.ID); err != nil || c != CancelUnknown {
		t.Fatalf("Cancel without a produced log = %v, %v; want unknown", c, err)
	}
	r2 := b.relay(t, ProducedRetention(time.Millisecond))
	r2.sweepEvery = 0
	if _, err := b.pool.Exec(t.Context(), "INSERT INTO "+ProducedTable+" (job_id, produced_at) VALUES ('old', now() - interval '1 minute')"); err != nil {
		t.Fatal(err)
	}
	run(t, r2)
	waitFor(t, "the sweep of the old produced ID", func() bool {
		c, err := Cancel(t.Context(), b.pool, "old")
		return err == nil && c == CancelUnknown
	})
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for name, opt := range map[string]Option{
		"zero At": At(time.Time{}), "empty key": Unique(""), "negative period": UniqueFor("k", -time.Second),
	} {
		if _, err := EnqueueJobTx(t.Context(), tx, enqueue.NewJob(b.topic, "x"), opt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := EnqueueJobTx(t.Context(), nil, enqueue.NewJob(b.topic, "x")); err == nil {
		t.Error("nil transaction accepted")
	}
	// The last of At and In wins.
	res, err := EnqueueJobTx(t.Context(), tx, enqueue.NewJob(b.topic, "x"), In(time.Hour), At(time.Now().Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	var due bool
	if err := tx.QueryRow(t.Context(), "SELECT due_at <= now() FROM "+Table+" WHERE job_id = $1", res.ID).Scan(&due); err != nil || !due {
		t.Fatalf("In then At(past): due now %v (%v), want At to win", due, err)
	}
}

// The options are pgoutbox's own: enqueue.Client, which has no outbox,
// cannot take them (a program that tries does not compile).
func TestOptionsAreNotEnqueueOptions(t *testing.T) {
	t.Parallel()
	opt := reflect.TypeFor[enqueue.Option]()
	for _, o := range []Option{At(time.Now()), In(time.Second), Unique("k"), UniqueFor("k", time.Second)} {
		if reflect.TypeOf(o).Implements(opt) {
			t.Errorf("%T implements enqueue.Option", o)
		}
	}
}

// laterRows is how many rows TestClaimIgnoresRowsForLater schedules for
// tomorrow: SHAREQ_OUTBOX_LATER_ROWS, default 100,000 (the figures in
// claimSQL's comment are from 1,000,000).
func laterRows(t testing.TB) int {
	if s := os.Getenv("SHAREQ_OUTBOX_LATER_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 100_000
}

// With many rows waiting for later, the claim and the next-due query
// read the due rows only, through the due index.
func TestClaimIgnoresRowsForLater(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	n := laterRows(t)
	ctx := t.Context()
	start := time.Now()
	if _, err := pool.Exec(ctx, `INSERT INTO `+Table+` (topic, key, value, job_id, due_at, next_attempt_at)
		SELECT 't', ('k' || (i % 1000))::bytea, 'v', 'later-' || i, now() + interval '1 day', now() + interval '1 day'
		FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+Table+` (topic, key, value, job_id)
		SELECT 't', ('k' || (i % 1000))::bytea, 'v', 'now-' || i FROM generate_series(1, 1000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+Table); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows for later and 1,000 due inserted in %v", n, time.Since(start).Round(time.Millisecond))
	explain := func(sql string, args ...any) (plan string, ms float64) {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan = strings.Join(lines, "\n")
		for _, l := range lines {
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "Execution Time: %f ms", &ms); err == nil {
				break
			}
		}
		return plan, ms
	}
	plan, ms := explain(claimSQL, BatchSizeDefault)
	t.Logf("claim of %d rows: %.2f ms\n%s", BatchSizeDefault, ms, plan)
	if !strings.Contains(plan, "shareq_outbox_due_idx") {
		t.Fatalf("the claim does not use the due index:\n%s", plan)
	}
	// The scan of the due index reads the due rows, not those for
	// later.
	m := regexp.MustCompile(`Scan (?:on|using) shareq_outbox_due_idx .*actual time=\S+ rows=(\d+) `).FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no scan of the due index in the claim's plan:\n%s", plan)
	}
	if read, _ := strconv.Atoi(m[1]); read > 1000 {
		t.Fatalf("the claim read %d entries of the due index, want at most the 1,000 due rows:\n%s", read, plan)
	}
	plan, ms = explain(`SELECT extract(epoch FROM min(due_at) - now())::float8 FROM ` + Table + ` WHERE due_at > now()`)
	t.Logf("next due: %.2f ms\n%s", ms, plan)
	if !strings.Contains(plan, "shareq_outbox_due_idx") || strings.Contains(plan, "Seq Scan") {
		t.Fatalf("the next-due query does not take the first index entry:\n%s", plan)
	}
}

// A cancel of a job that a relay is producing waits for the relay's
// round, and then says produced: the job is in Kafka once, and the
// cancel does not claim to have stopped it.
func TestCancelRacingTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	job := enqueueJob(t, b.pool, enqueue.NewJob(b.topic, "racing"))
	r := b.relay(t)
	acked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.afterProduce = func() error {
		once.Do(func() {
			close(acked)
			<-release
		})
		return nil
	}
	run(t, r)
	<-acked // the broker has the job; the relay's transaction holds its row
	conn, err := b.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	res := make(chan CancelResult, 1)
	go func() {
		c, err := Cancel(context.Background(), conn, job.ID)
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	waitLocked(t, b.pool, conn.Conn().PgConn().PID(), "the cancel to wait for the relay's row lock")
	close(release)
	if c := <-res; c != CancelProduced {
		t.Fatalf("Cancel racing the relay = %v, want produced", c)
	}
	if n := total(t, b.cluster, b.topic); n != 1 {
		t.Fatalf("%d records, want the job once", n)
	}
}

// A row that fails holds back the rows of its key due after it, through
// its retries; cancelling it lets them go. A row of the key not due yet
// stays.
func TestFailingRowHoldsItsKeyUntilCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	topic := kafkatest.Name(t, "small")
	small := "2000"
	b.cluster.CreateTopicWith(t, topic, 1, map[string]*string{"max.message.bytes": &small})
	raw := make([]byte, 4000) // random hex: the producer's compression cannot shrink it
	_, _ = rand.Read(raw)
	k := enqueue.Key([]byte("k"))
	big := enqueueJob(t, b.pool, enqueue.NewJob(topic, hex.EncodeToString(raw), k))
	next := enqueueJob(t, b.pool, enqueue.NewJob(topic, "next", k))
	enqueueJob(t, b.pool, enqueue.NewJob(topic, "tomorrow", k), In(24*time.Hour))
	r := b.relay(t)
	run(t, r)
	waitFor(t, "the big row to fail and be retried", func() bool {
		var attempts int
		err := b.pool.QueryRow(t.Context(), "SELECT attempts FROM "+Table+" WHERE job_id = $1", big.ID).Scan(&attempts)
		return err == nil && attempts >= 3
	})
	if n := total(t, b.cluster, topic); n != 0 || r.Stats().Produced != 0 {
		t.Fatalf("%d records, %d produced while the first row of the key fails; want none", n, r.Stats().Produced)
	}
	if res, err := Cancel(t.Context(), b.pool, big.ID); err != nil || res != CancelWithdrawn {
		t.Fatalf("Cancel(failing row) = %v, %v", res, err)
	}
	waitFor(t, "the next row of the key", func() bool { return r.Stats().Produced == 1 })
	if got := enqueue.RecordID(b.cluster.Consume(t, topic, 1)[0]); got != next.ID {
		t.Fatalf("produced %s, want %s", got, next.ID)
	}
	if n := rowCount(t, b.pool); n != 1 {
		t.Fatalf("%d rows, want the one due tomorrow", n)
	}
}
