// Package member is shareq's share-group member: one Kafka share-group
// member per worker that speaks the share protocol (KIP-932) itself, with
// franz-go as the transport (a kgo.Client for connections, TLS/SASL and
// request routing, kmsg requests, kgo.ProcessFetchPartition to decode
// record batches).
//
// Unlike franz-go's share consumer, a Member holds any number of records
// across any number of ShareFetch requests and acknowledges each one when
// its job ends, in any order. One goroutine (the one running
// [Member.Run]) owns every piece of state: the membership, a share session
// per broker that leads an assigned partition, every held record, every
// pending acknowledgement and renewal. Requests in flight (at most one per
// session) do only the I/O and hand their responses back to it. The other
// methods only queue work for that goroutine: they never block and are
// safe for concurrent use.
//
// The worker's executor is the only user. It grants capacity with
// [Member.Grant] (the member asks for at most that many records:
// record_limit fetches, or batch_optimized ones when the credit covers
// whole producer batches, which may deliver past it; see acquire.go),
// receives deliveries, renewal results and lost locks
// as [Event]s, and sends each record's terminal acknowledgement with
// [Member.Ack] and renewals with [Member.Renew]. The graceful stop is
// [Member.StopFetching], then [Member.Quiet], then the final acks, then
// [Member.Leave].
//
// The protocol facts this follows are measured on kfake and Apache Kafka
// and pinned by the conformance tests (see the protocol facts of
// docs/architecture.md, and docs/kafka-differences.md).
//
// # Where things are
//
//   - member.go: [Member], its fields by owner, [New] and the methods
//     other goroutines call, which only queue work in the mailbox.
//   - run.go: Run's loop: one step sends what is due, then it waits for a
//     result, the mailbox, the executor taking events, or a timer; and the
//     mailbox taken in (the worker's grants, acks and renewals).
//   - membership.go: heartbeats and the assignment; Metadata, and which
//     broker's share session fetches which partition.
//   - session.go: a share session per broker, and its pending set of ops
//     to send.
//   - requests.go (requests out): which request a session sends next
//     (turn, a short ordered list of rules) and how fetches and
//     acknowledgements are built and sent.
//   - answers.go (answers in): what each answer does to the sessions and
//     the held records, the acknowledgements' and renewals' results;
//     session errors.
//   - held.go: the held records: acquire makes them of a fetch's answer;
//     their counts, their drop, lost locks.
//   - events.go (events out): what the member hands the worker.
//   - keymap.go: [KeyMap], records by partition and then by offset, in a
//     window indexed by offset (the held records, a session's pending
//     set, the executor's jobs), and partCounts, a session's counts per
//     partition.
//   - decode.go: record batches to deliveries.
//   - bytes.go: the bytes in hand ([Config.MaxBytes]) and how they size
//     fetches.
//   - acquire.go: each fetch's acquire mode (record_limit or
//     batch_optimized), and what was measured of each.
//   - stop.go: the stop sequence (stopPhase, in order), the hard stop.
package member

// A record's path, from the ShareFetch that acquires it to the answer to
// its acknowledgement (sent alone, turn's rule 6), as a reader follows
// the calls and comes back to each caller to read on; each arrow is a
// change of file:
//
//	run.go (run) → answers.go (handle, handleSession) → reach.go
//	(noteReach) → answers.go (handleFetch) → held.go (acquire) → decode.go
//	(records) → held.go → idle.go (acquiredNow) → held.go (deliveredFrom)
//	→ decode.go (hold, letGo) → held.go → bytes.go (recordBytes) → held.go
//	(count; the delivery joins out) → answers.go (handleFetch) → bytes.go
//	(recordBytes, sized) → answers.go → run.go (run: Events) → member.go
//	(Ack, post) → run.go (mailbox, take) → held.go (count) → run.go →
//	held.go (count) → run.go → session.go (queue) → run.go (step) →
//	requests.go (turn, share) → run.go (canFetch) → requests.go → bytes.go
//	(recordsRoom) → requests.go (sendAck, takeOps, buildAck, launch) →
//	run.go (run) → answers.go (handle, handleSession) → reach.go →
//	answers.go (opsDone, opsAnswered) → events.go (emitAck) → answers.go →
//	held.go (drop) → decode.go (letGo) → held.go → session.go (unqueue) →
//	held.go (count) → answers.go → run.go (run: Events).
//
// 42 changes of file; 46 before the files followed the flow (acquire and
// the answers in responses.go, the emit functions in run.go, the answers
// to ops in held.go, turn and the request building in session.go). The
// rest are calls into other concerns and back: decoding, idle times,
// reachability, the bytes in hand, the counts of held records, the
// pending set. The lookups of the held records and the pending set
// (keymap.go's KeyMap and partCounts, plain map lookups until they
// replaced them) are not counted as changes of file.
