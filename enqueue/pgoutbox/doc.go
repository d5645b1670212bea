// Package pgoutbox enqueues shareq jobs inside a caller's Postgres
// transaction (pgx/v5), through an outbox table that a [Relay] moves to
// Kafka after the transaction commits: a rolled-back transaction enqueues
// nothing, a committed one always enqueues.
//
//	tx, err := pool.Begin(ctx)
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback(ctx) // does nothing after Commit
//	if _, err := tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", email); err != nil {
//		return err
//	}
//	if _, err := pgoutbox.EnqueueTx(ctx, tx, "emails", Welcome{Email: email}); err != nil {
//		return err
//	}
//	return tx.Commit(ctx)
//
// and, in the same program or another ("shareq relay"):
//
//	relay, err := pgoutbox.NewRelay(pool, kgoClient)
//	if err != nil {
//		return err
//	}
//	return relay.Run(ctx) // blocks until ctx is cancelled
//
// kgoClient needs enqueue.ProducerOpts (or
// kgo.RecordPartitioner(enqueue.Partitioner())): the relay's batches then
// spread keyless jobs over the partitions, one by one, and NewRelay
// refuses a client with franz-go's default, sticky, partitioner
// ([enqueue.ErrStickyPartitioner]), which would put a whole batch on one
// partition and so on one worker.
//
// The table is shareq_outbox, created by migration 0002 of package
// migrations (migrations.Up); migration 0003 adds jobs for later.
//
// # At enqueue time
//
// [EnqueueTx] encodes the job as package enqueue does (JSON value, job ID
// header, a fresh UUIDv7 unless enqueue.ID sets one) and inserts one row.
// A value that cannot be encoded ([enqueue.ErrEncode]) or a record larger
// than [MaxRecordBytes] ([enqueue.ErrTooLarge]) is an error then, and no
// row is written: a row in the outbox is one the relay can produce. A
// missing topic cannot be seen from Postgres; the relay reports it.
//
// # The relay
//
// A [Relay] takes committed rows that are due in due order (insertion
// order, for jobs without a due time), a batch at a time, locked
// with FOR UPDATE SKIP LOCKED so that several relays (one per worker
// process, say) share the table without producing a row twice. It
// produces the batch, waits for the broker's acknowledgements, and
// deletes the acknowledged rows in the same transaction that locked them.
//
// A relay's claim is a lease: Postgres ends the session of a relay that
// leaves its claimed rows idle in their transaction for longer than
// ProduceTimeout + [ClaimSlack] (idle_in_transaction_session_timeout, set
// for the round's transaction only), which rolls the claim back and
// releases the rows, and the rows of their keys behind them, to the other
// relays. A relay frozen mid-batch (SIGSTOP, a VM pause) so delays its
// rows by its lease at most, not for as long as it is frozen; woken, it
// finds its session ended, its delete fails (a [Stats.DBErrors]) and it
// goes on. Rows it had produced are produced again by the relay that took
// them over, with their job IDs: at least once, as below. Postgres counts
// idle time only: a relay frozen while Postgres still sends it the rows
// of its claim (a claim larger than the sockets' buffers) holds them
// until it wakes or the operating system ends the connection.
//
// A committed insert notifies the relays (LISTEN/NOTIFY, from a trigger
// the migration installs), so a job reaches Kafka within milliseconds of
// its commit; the relay also polls every [PollIntervalDefault], which
// picks up rows due for a retry and covers a lost listening connection.
//
// Jobs with the same topic and key reach Kafka in the order of their rows
// (the order of insertion, for jobs of one transaction or of transactions
// that commit one after the other; due order for jobs for later, below):
// a relay skips a row while an earlier row of its key is still in the
// table, locked by another relay or waiting for a retry. Jobs without a
// key have no order, as on Kafka.
//
// A row whose produce fails (the topic was deleted, the broker is down)
// stays in the table: the failure is logged (see [Logger]: once when
// produces begin to fail, once when a failed row goes through), counted in [Stats.Failures],
// recorded in the row (attempts, last_error) and retried with exponential
// backoff from [RetryBackoffDefault] up to [RetryBackoffMaxDefault], so
// the rows behind it, of other keys, go on. Rows of its key wait for it,
// left out of the relay's claims however many there are (migration 0007
// indexes the failing rows for that check).
// A lost Postgres is logged and counted in [Stats.DBErrors]; the relay
// retries by itself.
//
// # Jobs for later: due times, unique keys, cancel
//
// [EnqueueJobTx] enqueues an [enqueue.Job] with options that hold it in
// the outbox: [At] and [In] make it due later, [Unique] and [UniqueFor]
// refuse a second job with its key. It returns a [Result]: the job's ID,
// and whether it was a duplicate.
//
//	res, err := pgoutbox.EnqueueJobTx(ctx, tx, enqueue.NewJob("emails", FollowUp{Email: email}),
//		pgoutbox.In(24*time.Hour), pgoutbox.Unique("follow-up/"+email))
//	if err != nil {
//		return "", err
//	}
//	if res.Duplicate {
//		log.Printf("follow-up already scheduled as job %s", res.ID)
//	}
//
// These options are pgoutbox's own type, not enqueue.Option: a job
// enqueued straight to Kafka (enqueue.Client) has no outbox to wait in,
// and a program that asks for one there does not compile, rather than
// enqueueing an immediate job. [EnqueueManyTx] enqueues immediate jobs
// only.
//
// A job for later is a row like any other, with its due time (due_at,
// by Postgres's clock; [In] counts from the insert). What holds for rows
// holds for it: it is produced once a relay sees it due, at least once
// (a relay stopped or killed loses none; one killed between the broker's
// ack and its delete produces it again, with its job ID), and several
// relays share the rows without producing one twice.
//
//   - When: a relay produces a row once it is due, never before. It does
//     not wait for its poll: after each round, and so after each
//     notification of a commit, it sets a timer to the earliest due time
//     of the table, so a job for later is produced within milliseconds of
//     its due time while a relay runs and keeps up (at 1,000 jobs due a
//     second with 1,000,000 rows for later, 4.6 ms p50 and 31 ms p99 from
//     the due time to a consumer's receipt, on Kafka: BENCHMARKS.md);
//     [Stats.DueDelay] and the metrics say how late they are.
//   - Order: due rows go in due order, and rows due at the same time in
//     insertion order. A job without [At] or [In] is due at its insert
//     (clock_timestamp()), so immediate jobs keep their order as before
//     (a step back of Postgres's clock could swap two jobs inserted
//     across it). Per key, that is the
//     order too: a row of a key is produced only after every row of its
//     key due before it (including one waiting for a retry), and a row
//     not due yet holds back no other row of its key; a job of key k
//     scheduled for tomorrow is overtaken by a job of key k enqueued
//     after it for now.
//   - Cost: an index on (due_at, id) keeps the claim a scan of the due
//     rows, however many wait for later: with 1,000,000 rows due the
//     next day, a claim of 500 of 1,000 due rows takes 4 ms on a 2-core
//     test machine (TestClaimIgnoresRowsForLater), and the timer's query
//     reads one index entry.
//
// A unique key is held, in [UniqueTable], while its job waits in the
// outbox, and with [UniqueFor] for a period after the relay produced it;
// a cancel frees it. An enqueue with a held key writes nothing and
// returns the holder's ID with [Result.Duplicate] set, without error.
// The table's primary key decides, not a read: of concurrent
// transactions, the first to insert the key holds it and the others wait
// for it to commit (then they are duplicates) or roll back (then one of
// them holds it). A key is global to the outbox, across topics.
//
// [Cancel] (or [CancelTx], in the caller's transaction) withdraws a job
// by its ID while it waits, due or not: [CancelWithdrawn], and it never
// reaches Kafka. Any other ID is [CancelUnknown], including that of a job
// whose transaction has not committed yet, unless the relay produced it
// within [ProducedRetention] (it keeps produced IDs that long). A
// produced job is in Kafka, and only the worker's idempotency claim can
// stop it: give [ClaimKey] the key the worker's idempotency.Middleware
// claims for the job (idempotency.Key(group, topic, jobID) with its
// defaults), and CancelTx writes that key, marked cancelled, into the
// claim table of idempotency/pgstore ([CancelStopped]); the worker then
// ACCEPTs the job without running its handler and reports it as cancelled
// (worker.OutcomeCancelled, its log, shareq_jobs_total{outcome="cancelled"}).
// A job that already ran is [CancelTooLate]; one that is running makes
// the cancel wait for the run's transaction: too late when it commits,
// stopped when it fails. The job runs at most once either way. Without
// ClaimKey a produced job is [CancelProduced] and runs; and a worker that
// does not claim its jobs with idempotency.Middleware on
// idempotency/pgstore never reads the cancel, so it runs the job too.
// A cancel row is a claim row: pgstore's Sweep deletes it with the claims
// of its age, after which a redelivery of the job would run it.
//
//	res, err := pgoutbox.Cancel(ctx, pool, jobID,
//		pgoutbox.ClaimKey(idempotency.Key("mailer", "emails", jobID)))
//	if err != nil {
//		return err
//	}
//	switch res {
//	case pgoutbox.CancelWithdrawn, pgoutbox.CancelStopped:
//		// it will not run
//	case pgoutbox.CancelTooLate:
//		log.Printf("job %s already ran", jobID)
//	}
//
// Upgrading to cancels of produced jobs: apply migration 0004 (the
// cancelled_at column of the claim table) before any worker runs this
// version; pgstore's Check fails until then.
//
// Upgrading: apply migration 0003, then upgrade every relay before any
// program enqueues jobs for later. A relay of an earlier version still
// waits for a row's due time (next_attempt_at holds it too), but it
// keeps per-key order by insertion, records no produced IDs, and leaves
// the unique key of a job it produced held for good.
//
// # Snoozed jobs
//
// [Snoozer] keeps the copies of a worker's snoozed jobs (handler.Snooze)
// in the outbox instead of in Kafka: give it to worker.SnoozeVia.
//
//	w, err := worker.New(worker.Group("mailer"),
//		worker.Handle("emails", claims(send)), // claims: idempotency.Middleware on pgstore
//		worker.SnoozeVia(pgoutbox.Snoozer(pool)))
//
// A snooze of more than a minute (or one the worker held for MaxHold)
// writes the job's copy, its key, value and headers as they were, with
// the job ID and the snooze count, as a row due when the snooze ends, in
// a transaction of its own; the worker ACCEPTs the original once the row
// is committed, so the wait spends no delivery and holds no lock. A
// relay produces the copy when it is due, and the copy's first delivery
// runs the job. Each copy has a key (the job ID and the place of the
// record copied) held as a [UniqueFor] key for [SnoozeKeyPeriod] after
// its produce: a worker killed between the copy and its ACCEPT gets the
// original redelivered, snoozes it again, and the second copy is
// refused. With the claim middleware, the snoozed runs roll their claims
// back and the copy claims the job ID again, so the job's effect commits
// once, however often it was snoozed and whichever worker died. A
// snoozed job waiting in the outbox can be withdrawn with [Cancel].
// While Postgres is unreachable a copy cannot be written, and the worker
// RELEASEs the original instead (a delivery spent); see docs/limits.md.
//
// # Exactly once, end to end
//
// The relay is at least once: when it dies (or its commit fails) after
// the broker acknowledged a batch and before the delete committed, a new
// relay produces those rows again, with the same job IDs. The worker's
// idempotency middleware with idempotency/pgstore claims each job ID in
// the transaction of the job's effect, so the second copy finds the claim
// and does nothing: relay at least once plus the claim row is the effect
// exactly once.
package pgoutbox
