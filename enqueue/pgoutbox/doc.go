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
// migrations (migrations.Up).
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
// A [Relay] takes committed rows in id order, a batch at a time, locked
// with FOR UPDATE SKIP LOCKED so that several relays (one per worker
// process, say) share the table without producing a row twice. It
// produces the batch, waits for the broker's acknowledgements, and
// deletes the acknowledged rows in the same transaction that locked them.
//
// A committed insert notifies the relays (LISTEN/NOTIFY, from a trigger
// the migration installs), so a job reaches Kafka within milliseconds of
// its commit; the relay also polls every [PollIntervalDefault], which
// picks up rows due for a retry and covers a lost listening connection.
//
// Jobs with the same topic and key reach Kafka in the order of their rows
// (the order of insertion, for jobs of one transaction or of transactions
// that commit one after the other): a relay skips a row while an earlier
// row of its key is still in the table, locked by another relay or
// waiting for a retry. Jobs without a key have no order, as on Kafka.
//
// A row whose produce fails (the topic was deleted, the broker is down)
// stays in the table: the failure is logged (see [Logger]: once when
// produces begin to fail, once when a failed row goes through), counted in [Stats.Failures],
// recorded in the row (attempts, last_error) and retried with exponential
// backoff from [RetryBackoffDefault] up to [RetryBackoffMaxDefault], so
// the rows behind it, of other keys, go on. Rows of its key wait for it.
// A lost Postgres is logged and counted in [Stats.DBErrors]; the relay
// retries by itself.
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
