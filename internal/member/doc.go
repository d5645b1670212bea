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
//     result, the mailbox, the executor taking events, or a timer.
//   - membership.go: heartbeats and the assignment; Metadata, and which
//     broker's share session fetches which partition.
//   - session.go: a share session per broker; which request it sends next
//     (turn, a short ordered list of rules) and how fetches and
//     acknowledgements are built.
//   - answers.go: what each answer does to the sessions and the held
//     records; session errors.
//   - held.go: the held records, their acknowledgements' and renewals'
//     results, lost locks.
//   - decode.go: record batches to deliveries.
//   - bytes.go: the bytes in hand ([Config.MaxBytes]) and how they size
//     fetches.
//   - acquire.go: each fetch's acquire mode (record_limit or
//     batch_optimized), and what was measured of each.
//   - stop.go: the stop sequence (stopPhase, in order), the hard stop.
package member
