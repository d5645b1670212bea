// Package enqueue puts jobs on a shareq topic: a value is encoded as JSON
// (the form [handler.JSON] decodes), given a job ID in the
// [handler.JobIDHeader] header, and produced with a caller's
// *kgo.Client; Enqueue returns once the broker has acknowledged it.
//
//	q, err := enqueue.New(cl)
//	if err != nil {
//		return err
//	}
//	id, err := q.Enqueue(ctx, "emails", Email{To: "ada@example.com"})
//
// A value of type [Raw] is sent as it is instead of as JSON, for handlers
// that read the record's bytes themselves (an image, protobuf).
//
// # Partitions
//
// The client must be created with [ProducerOpts] (or
// kgo.RecordPartitioner([Partitioner]())): it sends each job without a
// key to the next partition of its topic, round-robin, so a burst, even
// one [Client.EnqueueMany] call, reaches every partition and so every
// worker of the share group (while the group has no more members than
// partitions, each partition has one member). A job with a key goes to
// the partition of its key, as with franz-go's default partitioner.
// franz-go's default partitioner is sticky: it would put the whole burst
// on one partition, and [New] refuses a client with it
// ([ErrStickyPartitioner]).
//
// # Job IDs
//
// Every job gets an ID: [ID] sets it, and by default it is a fresh
// UUIDv7 ([NewID]), unique and ordered by creation time. The worker's
// idempotency middleware keys claims on it, so a producer that retries an
// Enqueue whose outcome it did not learn should pass the same ID again:
// the two copies are then one job to the worker.
//
// # Errors
//
// A value that cannot be encoded fails with [ErrEncode] before anything is
// sent (for [Client.EnqueueMany]: before any job is sent). A topic that
// does not exist fails with [ErrUnknownTopic], a job larger than the
// topic's max.message.bytes (or the client's ProducerBatchMaxBytes) with
// [ErrTooLarge]. Other produce errors are returned wrapped as franz-go
// reported them.
//
// # In a Postgres transaction
//
// Package enqueue/pgoutbox enqueues inside the caller's pgx transaction,
// into an outbox table that its Relay moves to Kafka once the transaction
// has committed: a rolled-back transaction enqueues nothing, a committed
// one always enqueues. This package does not import pgx.
//
// A job enqueued here is ready the moment it is in Kafka: Kafka has no
// due time, no unique key and no withdrawal. Jobs for later, unique jobs
// and cancel are pgoutbox's (pgoutbox.EnqueueJobTx with pgoutbox.At,
// pgoutbox.In, pgoutbox.Unique; pgoutbox.Cancel), whose options are its
// own type: passing one to [Client.Enqueue] does not compile.
package enqueue
