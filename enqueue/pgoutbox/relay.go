package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

// Defaults of the options of [NewRelay].
const (
	// BatchSizeDefault is how many rows one relay round takes at most.
	BatchSizeDefault = 500
	// PollIntervalDefault is how often the relay looks for rows when no
	// notification woke it.
	PollIntervalDefault = time.Second
	// ProduceTimeoutDefault bounds the produce of one batch: a row not
	// acknowledged by then counts as failed and is retried.
	ProduceTimeoutDefault = 30 * time.Second
	// ClaimSlack is added to the ProduceTimeout to make a relay's claim
	// lease: Postgres ends the session of a relay that leaves its claimed
	// rows idle in their transaction for longer (its
	// idle_in_transaction_session_timeout, set for the round's
	// transaction), which releases the rows to the other relays. A relay
	// frozen between its claim and its delete (SIGSTOP, a VM pause, a
	// process throttled to nothing) holds its rows that long at most.
	ClaimSlack = 10 * time.Second
	// RetryBackoffDefault is the wait before the first retry of a row
	// whose produce failed; it doubles with each failure.
	RetryBackoffDefault = time.Second
	// RetryBackoffMaxDefault caps the wait between retries of a row, and
	// between attempts to reach Postgres.
	RetryBackoffMaxDefault = time.Minute
	// ProducedRetentionDefault is how long the relay keeps the IDs of
	// the jobs it produced, for [Cancel] to say [CancelProduced].
	ProducedRetentionDefault = time.Hour
	// SweepInterval is how often, at most, a relay deletes expired
	// unique keys and produced job IDs past their retention.
	SweepInterval = time.Minute
)

// A RelayOption configures [NewRelay].
type RelayOption interface{ apply(*relayConfig) }

type relayOptionFunc func(*relayConfig)

func (f relayOptionFunc) apply(c *relayConfig) { f(c) }

type relayConfig struct {
	batchSize      int
	pollInterval   time.Duration
	produceTimeout time.Duration
	backoff        time.Duration
	backoffMax     time.Duration
	retention      time.Duration
	logger         *slog.Logger
}

// BatchSize sets how many rows one round takes at most. Default
// [BatchSizeDefault].
func BatchSize(n int) RelayOption { return relayOptionFunc(func(c *relayConfig) { c.batchSize = n }) }

// PollInterval sets how often the relay looks for rows without a
// notification. A row scheduled for before the next poll ([At], [In])
// does not wait for it: the relay sets a timer to its due time. Default
// [PollIntervalDefault].
func PollInterval(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) { c.pollInterval = d })
}

// ProduceTimeout bounds the produce of one batch. Default [ProduceTimeoutDefault].
// With [ClaimSlack] it makes the lease of the rows a round claims: see
// [ClaimSlack].
func ProduceTimeout(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) { c.produceTimeout = d })
}

// RetryBackoff sets the first and the longest wait between retries of a
// failing row, and of a failing Postgres. Defaults [RetryBackoffDefault],
// [RetryBackoffMaxDefault]. The waits for Postgres stop growing at 5 s
// (or at longest, if shorter), so that the relay is back at work within
// seconds of an outage's end however long it lasted; a try costs one
// connection attempt.
func RetryBackoff(first, longest time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) { c.backoff, c.backoffMax = first, longest })
}

// ProducedRetention sets how long the relay keeps the ID of each job it
// produced in [ProducedTable], so that [Cancel] of such a job says
// [CancelProduced] rather than [CancelUnknown]; 0 keeps none. It costs
// one index entry per produced job, deleted after d (every
// [SweepInterval]): at 1,000 jobs a second and the default, about 3.6
// million rows. With several relays on one table, the shortest retention
// wins. Default [ProducedRetentionDefault].
func ProducedRetention(d time.Duration) RelayOption {
	return relayOptionFunc(func(c *relayConfig) { c.retention = d })
}

// Logger sets the relay's logger. Default slog.Default(), as the
// worker's. The relay logs its start and stop at Info; a failure at Warn
// once when it begins (produce failures, a Postgres that cannot be
// reached, a lost LISTEN connection) and at Info once when it ends, so an
// outage of any length is two lines, not one per row or retry. Every
// retry in between is logged at Debug.
func Logger(l *slog.Logger) RelayOption {
	return relayOptionFunc(func(c *relayConfig) { c.logger = l })
}

// Relay moves committed jobs from the outbox table to Kafka. Several
// relays may run against one table. Create it with [NewRelay] and run it
// with [Relay.Run]; [Relay.Stats] and [Relay.Backlog] may be called at
// any time, from any goroutine.
type Relay struct {
	pool *pgxpool.Pool
	p    enqueue.Producer
	cfg  relayConfig

	produced atomic.Uint64
	failures atomic.Uint64
	dbErrors atomic.Uint64
	rounds   atomic.Uint64
	delayNs  atomic.Int64  // sum of due delays of the rows in delayN
	delayN   atomic.Uint64 // produced rows with a finite due time
	running  atomic.Bool

	// Owned by the goroutine of Run: when the last sweep ran.
	swept time.Time
	// sweepEvery is SweepInterval; tests shorten it.
	sweepEvery time.Duration
	// claimSlack is ClaimSlack; tests shorten it.
	claimSlack time.Duration

	// listening is true while the relay's connection LISTENs.
	listening atomic.Bool

	// Outage state, for logging each outage once when it begins and once
	// when it ends. Owned by the goroutine of Run (produce, db) and by
	// listen's goroutine (listen).
	produce outage
	db      outage
	listen  outage

	// afterProduce, when set (by tests), runs after the broker
	// acknowledged a batch and before its rows are deleted; an error
	// rolls the round back, as a relay that died there would.
	afterProduce func() error
}

// NewRelay returns a relay that reads the outbox through pool and
// produces with p, normally a *kgo.Client (which it does not close). A
// *kgo.Client must spread keyless jobs over the partitions, as
// enqueue.New requires: NewRelay fails with [enqueue.ErrStickyPartitioner]
// for one created without enqueue.ProducerOpts.
func NewRelay(pool *pgxpool.Pool, p enqueue.Producer, opts ...RelayOption) (*Relay, error) {
	cfg := relayConfig{
		batchSize:      BatchSizeDefault,
		pollInterval:   PollIntervalDefault,
		produceTimeout: ProduceTimeoutDefault,
		backoff:        RetryBackoffDefault,
		backoffMax:     RetryBackoffMaxDefault,
		retention:      ProducedRetentionDefault,
		logger:         slog.Default(),
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	var errs []error
	if pool == nil {
		errs = append(errs, errors.New("nil pool"))
	}
	if p == nil {
		errs = append(errs, errors.New("nil Producer"))
	} else if err := enqueue.CheckProducer(p); err != nil {
		errs = append(errs, err)
	}
	if cfg.batchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize(%d): must be at least 1", cfg.batchSize))
	}
	if cfg.pollInterval <= 0 || cfg.produceTimeout <= 0 {
		errs = append(errs, errors.New("PollInterval and ProduceTimeout must be positive"))
	}
	if cfg.backoff <= 0 || cfg.backoffMax < cfg.backoff {
		errs = append(errs, fmt.Errorf("RetryBackoff(%v, %v): want 0 < first <= longest", cfg.backoff, cfg.backoffMax))
	}
	if cfg.retention < 0 {
		errs = append(errs, fmt.Errorf("ProducedRetention(%v): negative", cfg.retention))
	}
	if cfg.logger == nil {
		errs = append(errs, errors.New("nil Logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pgoutbox: %w", err)
	}
	return &Relay{pool: pool, p: p, cfg: cfg, sweepEvery: SweepInterval, claimSlack: ClaimSlack}, nil
}

// Stats are a relay's counters since it was created. They only grow.
type Stats struct {
	// Produced counts rows the broker acknowledged and the relay
	// deleted.
	Produced uint64
	// Failures counts produce failures of rows, each retried later.
	Failures uint64
	// DBErrors counts rounds (and listening connections) that failed on
	// Postgres.
	DBErrors uint64
	// Rounds counts the relay's rounds that read the outbox without
	// failing, whether they found rows or not.
	Rounds uint64
	// DueDelay is the sum, over DueDelayCount produced rows, of the time
	// from each row's due time to its delete after the broker's
	// acknowledgement, on Postgres's clock. A job without [At] or [In] is
	// due at its insert, so its delay includes the rest of its
	// transaction; one enqueued with a due time already past counts from
	// its transaction's start; rows from before migration 0003 are not
	// counted.
	DueDelay      time.Duration
	DueDelayCount uint64
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	return Stats{Produced: r.produced.Load(), Failures: r.failures.Load(), DBErrors: r.dbErrors.Load(),
		Rounds: r.rounds.Load(), DueDelay: time.Duration(r.delayNs.Load()), DueDelayCount: r.delayN.Load()}
}

// Backlog describes the rows waiting in the outbox table, of every relay.
type Backlog struct {
	// Rows is the number of committed rows not yet relayed, due or
	// not.
	Rows int64
	// Scheduled is how many of them are not due yet ([At], [In]).
	Scheduled int64
	// Failing is how many of them have failed at least once.
	Failing int64
	// OldestAge is how long the row that has been due longest has been
	// due: since its due time, or since its transaction's start for one
	// enqueued already due (a job without [At] or [In] is due at its
	// insert); 0 when no row is due. Rows scheduled for later do not
	// age.
	OldestAge time.Duration
}

// Backlog reads the outbox table's backlog (one aggregate query).
func (r *Relay) Backlog(ctx context.Context) (Backlog, error) {
	return ReadBacklog(ctx, r.pool)
}

// Run relays until ctx is cancelled, then finishes the round in progress
// (within [ProduceTimeout]) and returns nil. Failures of Postgres or of
// the broker do not stop it: it logs them, counts them in [Relay.Stats]
// and tries again. Run checks at start that the outbox table exists, and
// returns an error saying to run the migrations when it does not. A
// Relay runs once at a time.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("pgoutbox: Relay.Run called while running")
	}
	defer r.running.Store(false)
	if err := r.Check(ctx); err != nil {
		return err
	}
	log := r.cfg.logger
	log.LogAttrs(ctx, slog.LevelInfo, "pgoutbox: relay started", slog.String("table", Table),
		slog.Int("batch_size", r.cfg.batchSize), slog.Duration("poll_interval", r.cfg.pollInterval))
	defer func() {
		s := r.Stats()
		log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "pgoutbox: relay stopped", slog.Uint64("produced", s.Produced),
			slog.Uint64("produce_failures", s.Failures), slog.Uint64("db_errors", s.DBErrors))
	}()
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.listenLoop(ctx, wake) })
	defer wg.Wait()
	defer cancel()

	poll := time.NewTimer(0)
	defer poll.Stop()
	dbBackoff := time.Duration(0)
	for {
		full, claimed, err := r.round(ctx)
		if err != nil && !errors.Is(err, errKilled) {
			r.dbErrors.Add(1)
			dbBackoff = r.cfg.dbBackoff(dbBackoff)
			r.db.fail(ctx, log, "pgoutbox: relay cannot work on the outbox in Postgres; retrying with backoff",
				slog.String("error", err.Error()), slog.Duration("retry_in", dbBackoff))
		} else {
			dbBackoff = 0
			if err == nil {
				r.db.recover(ctx, log, "pgoutbox: relay reaches Postgres again")
			}
		}
		if ctx.Err() != nil || errors.Is(err, errKilled) {
			return nil
		}
		if err == nil {
			r.sweep(ctx) // at most every SweepInterval
		}
		if full && err == nil {
			continue // more rows are waiting
		}
		wait := r.cfg.pollInterval
		if dbBackoff > 0 {
			wait = dbBackoff
		} else if d, ok := r.nextDue(ctx, claimed); ok && d < wait {
			wait = d // the next scheduled row is due before the next poll
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			if dbBackoff > 0 { // a notification means Postgres is back
				dbBackoff = 0
			}
		case <-poll.C:
		}
	}
}

// dbRetryMax caps the wait between tries of a Postgres that cannot be
// reached (see RetryBackoff).
const dbRetryMax = 5 * time.Second

// dbBackoff is the wait after prev before the next try of a failing
// Postgres: doubled from the first backoff, at most dbRetryMax.
func (c *relayConfig) dbBackoff(prev time.Duration) time.Duration {
	return min(max(2*prev, c.backoff), c.backoffMax, dbRetryMax)
}

// Check returns an error, saying to run the migrations, when the outbox
// table cannot be read through the relay's pool (it is missing, or
// Postgres cannot be reached). [Relay.Run] makes the same check at start;
// call Check to fail earlier, for example in an application's start-up.
func (r *Relay) Check(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, "SELECT 1 FROM "+Table+" LIMIT 0"); err != nil {
		return fmt.Errorf("pgoutbox: the outbox table %s is not readable (run migrations.Up): %w", Table, err)
	}
	return nil
}

// listenLoop holds a connection that LISTENs on [Channel] and signals
// wake on each notification, and once after each (re)connection to cover
// commits made while it was not listening. It reconnects with backoff.
func (r *Relay) listenLoop(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		r.dbErrors.Add(1)
		backoff = r.cfg.dbBackoff(backoff)
		r.listen.fail(ctx, r.cfg.logger, "pgoutbox: relay has no LISTEN connection; polling every PollInterval until it is back",
			slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, signal func()) error {
	pc, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack() // a listening connection does not go back to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	r.listening.Store(true)
	defer r.listening.Store(false)
	r.listen.recover(ctx, r.cfg.logger, "pgoutbox: relay listens again")
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}

// dbTimeout bounds the Postgres work of one round.
const dbTimeout = 30 * time.Second

// errKilled is returned by a round that the afterProduce hook stopped.
var errKilled = errors.New("pgoutbox: relay stopped between produce and delete")

type row struct {
	id       int64
	topic    string
	key      []byte
	value    []byte
	hkeys    []string
	hvals    [][]byte
	jobID    string
	created  time.Time
	attempts int
	blocked  bool
}

// claimSQL locks the next due rows, in due order, that no other relay
// holds, that do not wait for a retry and that no row of their topic and
// key waiting for a retry precedes, and flags those that a row of their
// topic and key due before them, outside the batch (another relay holds
// it), must precede. Due order is (due_at, id): rows due at the same time
// go in insertion order. A row not due yet precedes no due row, so it
// holds back no other row of its key; a row waiting for a retry does, and
// the rows it holds back are left out of the claim rather than flagged,
// so that a batch's worth of them cannot fill every claim and starve the
// other keys until the retry goes through. The partial index of migration
// 0007 (rows that failed: attempts > 0) keeps that check one probe of a
// small index per row.
//
// The index (due_at, id) makes the claim a range scan of the due rows,
// however many wait for later. TestClaimIgnoresRowsForLater with
// SHAREQ_OUTBOX_LATER_ROWS=1000000 (1,000,000 rows due tomorrow, 1,000
// due now, on the test Postgres of a 2-core machine): the 500-row claim
// reads the 1,000 due entries of the index (15 buffers for the scan) and
// runs in 4 ms, most of it the per-row key check; the next-due query of
// the wake-up timer reads one index entry, in 0.1 ms.
const claimSQL = `
WITH c AS (
	SELECT o.id FROM ` + Table + ` o
	WHERE o.due_at <= now() AND o.next_attempt_at <= now()
	AND NOT (o.key IS NOT NULL AND EXISTS (
		SELECT 1 FROM ` + Table + ` r
		WHERE r.attempts > 0 AND r.topic = o.topic AND r.key = o.key
		AND (r.due_at, r.id) < (o.due_at, o.id) AND r.next_attempt_at > now()
	))
	ORDER BY o.due_at, o.id
	LIMIT $1
	FOR UPDATE OF o SKIP LOCKED
)
SELECT o.id, o.topic, o.key, o.value, o.header_keys, o.header_values, o.job_id, o.created_at, o.attempts,
	o.key IS NOT NULL AND EXISTS (
		SELECT 1 FROM ` + Table + ` e
		WHERE e.topic = o.topic AND e.key = o.key AND (e.due_at, e.id) < (o.due_at, o.id)
		AND e.id NOT IN (SELECT id FROM c)
	) AS blocked
FROM ` + Table + ` o JOIN c ON c.id = o.id
ORDER BY o.due_at, o.id`

// deleteSQL deletes the produced rows, starts the period of their unique
// keys, records their job IDs when $2 (the retention) is positive, and
// returns the sum and count of their due delays. The job IDs go in in
// sorted order, so that two relays recording one reused ID lock in the
// same order and do not deadlock.
const deleteSQL = `
WITH d AS (
	DELETE FROM ` + Table + ` WHERE id = ANY($1)
	RETURNING job_id, unique_key,
		CASE WHEN isfinite(due_at) THEN extract(epoch FROM clock_timestamp() - greatest(due_at, created_at)) END AS delay
), u AS (
	UPDATE ` + UniqueTable + ` k SET expires_at = now() + k.unique_for
	FROM d WHERE k.key = d.unique_key AND k.job_id = d.job_id
), p AS (
	INSERT INTO ` + ProducedTable + ` (job_id) SELECT DISTINCT job_id FROM d WHERE $2::bigint > 0 ORDER BY job_id
	ON CONFLICT (job_id) DO UPDATE SET produced_at = excluded.produced_at
)
SELECT coalesce(sum(delay), 0)::float8, count(delay) FROM d`

// round relays one batch in one transaction and reports whether the
// batch was full (more rows may be due), and the time of its claim by
// Postgres's clock (the transaction's now()).
func (r *Relay) round(ctx context.Context) (full bool, claimed time.Time, err error) {
	// A stop does not interrupt a round: its rows are produced within
	// ProduceTimeout, and deleted or marked for a retry within
	// dbTimeout.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.produceTimeout+dbTimeout)
	defer cancel()
	tx, err := r.pool.Begin(rctx)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("pgoutbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(rctx)) }()
	// The lease, the claim and its time in one round trip. The claimed
	// rows stay locked until the commit, whatever happens to this
	// process: the lease (idle_in_transaction_session_timeout, for this
	// transaction only) makes Postgres end the session, and so release
	// the rows, when the transaction stays idle longer than a produce
	// can take plus ClaimSlack: the relay froze. Without it a frozen
	// relay's rows, and every row of their keys behind them, waited for
	// it to wake. A relay that wakes after its lease ran out finds its
	// session gone: its delete fails, and the rows it produced are
	// produced again by the relay that took them over, with the same
	// job IDs (the worker's claim absorbs the second record).
	var batch []row
	var b pgx.Batch
	b.Queue("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", fmt.Sprintf("%dms", r.lease().Milliseconds()))
	b.Queue("SELECT now()").QueryRow(func(rs pgx.Row) error { return rs.Scan(&claimed) })
	b.Queue(claimSQL, r.cfg.batchSize).Query(func(rows pgx.Rows) error {
		var err error
		batch, err = pgx.CollectRows(rows, func(rs pgx.CollectableRow) (row, error) {
			var w row
			err := rs.Scan(&w.id, &w.topic, &w.key, &w.value, &w.hkeys, &w.hvals, &w.jobID, &w.created, &w.attempts, &w.blocked)
			return w, err
		})
		return err
	})
	if err := tx.SendBatch(rctx, &b).Close(); err != nil {
		return false, claimed, fmt.Errorf("pgoutbox: claim rows: %w", err)
	}
	if len(batch) == 0 {
		r.rounds.Add(1)
		return false, claimed, nil
	}
	full = len(batch) == r.cfg.batchSize

	// Rows of a key behind a row that must go first wait for the next
	// round.
	type tk struct{ topic, key string }
	held := map[tk]bool{}
	var recs []*kgo.Record
	byRec := map[*kgo.Record]*row{}
	for i := range batch {
		w := &batch[i]
		k := tk{w.topic, string(w.key)}
		if w.key != nil && (w.blocked || held[k]) {
			held[k] = true
			continue
		}
		rec := &kgo.Record{Topic: w.topic, Key: w.key, Value: w.value, Timestamp: w.created}
		for j := range w.hkeys {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: w.hkeys[j], Value: w.hvals[j]})
		}
		recs = append(recs, rec)
		byRec[rec] = w
	}
	if len(recs) == 0 {
		r.rounds.Add(1)
		return false, claimed, nil // every row waits for an earlier one: no progress to repeat
	}
	pctx, pcancel := context.WithTimeout(rctx, r.cfg.produceTimeout)
	res := r.p.ProduceSync(pctx, recs...)
	pcancel()
	retried := false // a row that had failed before went through
	var done []int64
	var failed []*row
	var failErrs []string
	for _, pr := range res {
		w := byRec[pr.Record]
		if w == nil {
			continue
		}
		delete(byRec, pr.Record)
		if pr.Err == nil {
			done = append(done, w.id)
			retried = retried || w.attempts > 0
			continue
		}
		perr := enqueue.ProduceError(pr.Record, pr.Err)
		failed = append(failed, w)
		failErrs = append(failErrs, perr.Error())
		r.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "pgoutbox: relay could not produce a job; it stays in the outbox and is retried",
			slog.String("job_id", w.jobID), slog.String("topic", w.topic), slog.Int64("row", w.id),
			slog.Int("attempts", w.attempts+1), slog.String("error", perr.Error()))
	}
	for _, w := range byRec { // no result: treat as failed
		failed = append(failed, w)
		failErrs = append(failErrs, "the producer returned no result")
	}

	if r.afterProduce != nil {
		if err := r.afterProduce(); err != nil {
			return false, claimed, errKilled
		}
	}
	var delaySum float64
	var delayN int64
	if len(done) > 0 {
		if err := tx.QueryRow(rctx, deleteSQL, done, r.cfg.retention.Microseconds()).Scan(&delaySum, &delayN); err != nil {
			return false, claimed, fmt.Errorf("pgoutbox: delete %d relayed rows: %w", len(done), err)
		}
	}
	if len(failed) > 0 {
		ids := make([]int64, len(failed))
		delays := make([]float64, len(failed))
		for i, w := range failed {
			ids[i] = w.id
			delays[i] = r.retryDelay(w.attempts + 1).Seconds()
		}
		if _, err := tx.Exec(rctx, `UPDATE `+Table+` o SET attempts = o.attempts + 1,
			next_attempt_at = now() + f.delay * interval '1 second', last_error = f.err
			FROM unnest($1::bigint[], $2::float8[], $3::text[]) AS f(id, delay, err) WHERE o.id = f.id`,
			ids, delays, failErrs); err != nil {
			return false, claimed, fmt.Errorf("pgoutbox: record %d failed rows: %w", len(failed), err)
		}
	}
	if err := tx.Commit(rctx); err != nil {
		return false, claimed, fmt.Errorf("pgoutbox: commit: %w", err)
	}
	r.produced.Add(uint64(len(done)))
	r.failures.Add(uint64(len(failed)))
	r.delayNs.Add(int64(delaySum * float64(time.Second)))
	r.delayN.Add(uint64(delayN))
	r.rounds.Add(1)
	switch {
	case len(failed) > 0:
		r.produce.fail(ctx, r.cfg.logger, "pgoutbox: relay cannot produce jobs; they stay in the outbox and are retried with backoff",
			slog.Int("failed", len(failed)), slog.Int("produced", len(done)), slog.String("first_error", failErrs[0]))
	case retried:
		r.produce.recover(ctx, r.cfg.logger, "pgoutbox: relay produces again: a job that had failed went through")
	}
	return full, claimed, nil
}

// lease is how long a round's transaction may stay idle, holding its
// claimed rows, before Postgres ends its session.
func (r *Relay) lease() time.Duration { return r.cfg.produceTimeout + r.claimSlack }

// nextDue returns how long until the earliest row due after claimed (the
// last round's claim, by Postgres's clock) is due, 0 for a row that fell
// due since then, and false when there is none or Postgres cannot say
// (the next round reports that). A row that fell due during the round
// was not in its claim and is not due after now: counting from the claim
// gets it a round at once rather than at the next poll. That round claims
// it, or finds it held back (a row of its key waits for a retry, another
// relay holds it); then its due time is before that round's claim and it
// no longer counts, so the relay does not spin on it.
func (r *Relay) nextDue(ctx context.Context, claimed time.Time) (time.Duration, bool) {
	qctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var secs *float64
	err := r.pool.QueryRow(qctx, `SELECT extract(epoch FROM min(due_at) - now())::float8 FROM `+Table+` WHERE due_at > $1`, claimed).Scan(&secs)
	if err != nil || secs == nil {
		return 0, false
	}
	// A millisecond more, so that the round it wakes runs after the due
	// time.
	return max(0, time.Duration(*secs*float64(time.Second))) + time.Millisecond, true
}

// sweepBatch bounds the rows one sweep deletes from each table.
const sweepBatch = 10_000

// sweep deletes, at most every sweepEvery, the unique keys whose period
// has ended and the produced job IDs past the retention. A failure is
// logged at Debug and retried at the next sweep.
func (r *Relay) sweep(ctx context.Context) {
	now := time.Now()
	if now.Sub(r.swept) < r.sweepEvery {
		return
	}
	r.swept = now
	qctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	_, err := r.pool.Exec(qctx, `DELETE FROM `+UniqueTable+` WHERE key IN (
		SELECT key FROM `+UniqueTable+` WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)`, sweepBatch)
	if err == nil {
		_, err = r.pool.Exec(qctx, `DELETE FROM `+ProducedTable+` WHERE job_id IN (
			SELECT job_id FROM `+ProducedTable+` WHERE produced_at < now() - $1::bigint * interval '1 microsecond'
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, r.cfg.retention.Microseconds(), sweepBatch)
	}
	if err != nil && ctx.Err() == nil {
		r.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "pgoutbox: relay could not sweep expired unique keys and produced job IDs; it tries again later",
			slog.String("error", err.Error()))
	}
}

// outage logs a recurring failure once when it begins (Warn) and once
// when it ends (Info), and each failure in between at Debug. It is owned
// by one goroutine.
type outage struct {
	since    time.Time // start of the current outage; zero when there is none
	failures int       // failures in the current outage
}

func (o *outage) fail(ctx context.Context, log *slog.Logger, msg string, attrs ...slog.Attr) {
	o.failures++
	level := slog.LevelDebug
	if o.since.IsZero() {
		o.since, level = time.Now(), slog.LevelWarn
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}

func (o *outage) recover(ctx context.Context, log *slog.Logger, msg string) {
	if o.since.IsZero() {
		return
	}
	log.LogAttrs(ctx, slog.LevelInfo, msg, slog.Duration("after", time.Since(o.since).Round(time.Millisecond)),
		slog.Int("failures", o.failures))
	o.since, o.failures = time.Time{}, 0
}

// retryDelay is the wait before the next attempt of a row that has
// failed attempts times.
func (r *Relay) retryDelay(attempts int) time.Duration {
	d := r.cfg.backoff
	for i := 1; i < attempts && d < r.cfg.backoffMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.backoffMax)
}
