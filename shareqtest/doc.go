// Package shareqtest runs shareq handlers against an in-process Kafka
// broker in a user's own tests: produce some jobs, run a real worker until
// every job has a final outcome, and assert on the outcomes.
//
// It is the repository's one test kit for workers, and it stands apart
// from the engine as franz-go's kfake and River's rivertest do: it
// imports the public packages only (worker, handler, dlq, enqueue),
// nothing in the engine or under internal/ imports it, and shareq's own
// tests of the worker, the middleware, the outbox and the soak use the
// same [Observer] a user's test does.
//
//	func TestSendEmail(t *testing.T) {
//		q := shareqtest.New(t, shareqtest.Topic("emails"))
//		ok := q.ProduceJSON(t, Email{To: "ada@example.com"})
//		bad := q.Produce(t, []byte("{oops"), shareqtest.JobID("bad-1"))
//
//		res := q.Run(t, handler.JSON(sendEmail))
//
//		res.RequireAccepted(t, ok)
//		res.RequireRejected(t, bad, handler.ReasonDecode)
//	}
//
// # What runs
//
// [New] starts a one-broker kfake cluster (franz-go's in-process Kafka,
// nothing on disk, no network beyond 127.0.0.1) with the topic and share
// group of the test, and stops it when the test ends. The broker locks a
// delivered record for [LockDurationDefault] (2 s) and notices expired
// locks within 100 ms, so a test that lets a lock run out takes seconds,
// not the 30 s of a production broker.
//
// [Queue.Run] runs a real [worker.Worker] with the handler: the same share-group
// member, acknowledgements, lock renewals and middleware as in production. It
// returns once every job produced with [Queue.Produce] or
// [Queue.ProduceJSON] has a final outcome, and fails the test if that
// takes longer than [RunTimeoutDefault] (30 s).
//
// # Outcomes
//
// Run watches the worker through a [worker.Observer] and records every
// delivery of every record. A job's final outcome is one of:
//
//	Accepted  the handler returned nil: the worker ACCEPTed the record
//	Rejected  the handler failed permanently (handler.Permanent, a decode
//	          failure of handler.JSON, a panic): the worker REJECTed it
//	Parked    the job was parked in the dead-letter topic (with DLQ):
//	          the dlq middleware produced it there and the worker ACCEPTed
//	Archived  the handler failed on the job's last delivery and the worker
//	          RELEASEd it: the broker's delivery limit is reached, so the
//	          broker archives the record and never delivers it again
//	Cancelled the job was cancelled after it was produced
//	          (pgoutbox.CancelTx with pgoutbox.ClaimKey): the idempotency
//	          middleware did not run the handler and the worker ACCEPTed
//
// Any other failure RELEASEs the job and the broker delivers it again with
// its delivery count raised by one; each such delivery is in
// [JobResult.Deliveries]. The broker's delivery limit is
// [DeliveryLimitDefault] (5, Kafka's default) unless [DeliveryLimit] sets
// it. Between deliveries the worker holds a failed job for
// [RetryBackoffDefault] (10 ms) rather than production's 1, 2, 4 and 8 s,
// and fetches wait at most 20 ms, so a job retried up to its limit takes
// a fraction of a second (about 0.2 s for five deliveries); pass
// worker.RetryBackoff to [Queue.Run] to test with another backoff.
//
// # A worker of your own
//
// To test the worker your app builds (its constructor, options and
// middleware; workerfx; a real broker in CI), run it yourself with an
// [Observer] among its observers (worker.Observers) and wait for each
// job with [Observer.WaitJob], or for any condition on the jobs finished
// so far with [Observer.WaitFor]. A [Queue] is then only the broker:
// [Queue.Brokers], [Queue.Group] and [Queue.Topic] for the worker,
// [Queue.Produce] for the jobs; the Queue's group starts at the earliest
// offset, so the worker sees the jobs produced before it started.
// [Logger] is a logger for it that is quiet unless the test runs with
// -v.
//
// # Code that enqueues
//
// [Recorder] stands in for Kafka under enqueue.New, and
// [RequireEnqueued] asserts what the code under test enqueued, there or
// on a Queue's broker.
//
// # Differences from production
//
// kfake implements share groups closely but is not Apache Kafka: it is a
// fast, faithful stand-in for testing handler logic and outcome mapping,
// not a substitute for running the worker against a real broker before
// release. Records are delivered in no guaranteed order, as on a real
// share group.
//
// # Examples without a test
//
// Every function takes the test's testing.TB. The package's runnable
// examples pass a zero *testing.T and close the Queue themselves, because
// an Example has no t; a real test passes its own t, which closes the
// Queue when the test ends.
package shareqtest
