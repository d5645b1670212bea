// Package idempotency makes a job's side effects happen once even though
// share groups deliver every record at least once.
//
// # What at-least-once leaves to you
//
// A job can be delivered again after it ran: its lock ran out while the
// handler was still working, the worker died after the side effect but
// before its ACCEPT reached the broker, or the ACCEPT was lost with a
// connection. A producer that retries a send can also write the same job
// twice. The broker cannot tell these apart from a first delivery, so the
// handler runs again.
//
// # What the claim adds
//
// [Middleware] gives every job a key (by default its group, its topic and
// [handler.Job.ID]: the producer's shareq-job-id header when present, else
// topic/partition/offset) and asks a [Store] to claim it. A transactional
// store (see the pgstore package) begins a database transaction, inserts
// the key into its claim table with ON CONFLICT DO NOTHING, runs the
// handler with that transaction in its context, and commits. The handler
// writes its side effects through the same transaction, found with [Tx] (or
// pgstore.Tx for a typed pgx.Tx), so they and the claim commit together or
// not at all:
//
//   - the key was free: the handler runs; its result decides the outcome.
//     Only when the handler returned nil and the commit succeeded does the
//     middleware return nil, so the worker ACCEPTs the record after the
//     claim is durable, never before.
//   - the key was already claimed: the job ran to completion before. The
//     middleware returns nil (ACCEPT) without running the handler, and tells
//     the [OnDuplicate] hook.
//   - the handler failed: the transaction rolls back, the key stays free,
//     and the handler's error is returned unchanged, so [handler.Permanent]
//     stays permanent and any other error releases the job for another try.
//   - the store is down (pgstore: Postgres unreachable or failing over,
//     also under a handler whose statements died with the connection):
//     the store's [handler.UnavailableError] is returned, and the worker
//     pauses, holding the job on its delivery, until the store is back.
//   - the store failed otherwise (begin, insert or commit failed): the
//     middleware returns [handler.Retry] with reason [ReasonStore] and the
//     job is released and delivered again.
//
// A second delivery that arrives while the first is still running waits
// on the first one's claim (the database blocks the second insert on the
// first one's uncommitted row; [MemoryStore] blocks on a per-key lock) and
// then sees the key claimed, or free again if the first one failed.
//
// # A commit with an unknown outcome
//
// When the connection is lost during COMMIT the client cannot tell whether
// the transaction committed. The middleware treats this as a store failure
// (an outage, with pgstore) and the job runs again. That is safe: the claim row and the side effects
// were written in one transaction, so they were either both committed (the
// next delivery finds the key and ACCEPTs without running the handler) or
// both rolled back (the next delivery runs the handler again, from
// scratch). What is never safe, and never done, is to ACCEPT a job whose
// claim did not commit.
//
// # What the claim does not cover
//
// Only effects written through the claim's transaction are exactly-once.
// An e-mail sent or an HTTP call made from the handler is not rolled back
// when the transaction is; such a handler still sees a job at least once
// when it fails after the call, and should pass the job's key on to the
// remote service's own idempotency key where it has one.
//
// Claims are kept until a retention sweep removes them ([Sweeper]). Keep
// them longer than a job can be delivered again: at least the topic's
// retention, so that a producer's duplicate copy still finds the claim.
//
// # Batches
//
// A batch handler (handler.Batch) claims its jobs with [Batch] rather
// than [Middleware]: one transaction of a [BatchStore] claims every job
// of a call, the batch function writes through it, and the claims of the
// jobs it failed are undone before the commit, so each of them retries
// alone while the others commit once. [Middleware] on each job of a
// batch would hold a transaction, and a connection, per job while the
// batch gathers.
//
// [MemoryStore] is for development and tests: it is not transactional and
// not shared between processes.
package idempotency
