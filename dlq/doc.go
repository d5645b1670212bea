// Package dlq parks jobs that cannot succeed in a dead-letter (DLQ) topic,
// reads them back, and replays them.
//
// # Why workers park jobs themselves
//
// A share group's broker counts each record's deliveries and, when a
// record that is released reaches the group's delivery limit
// (share.delivery.count.limit, default 5), archives it silently: it is
// never delivered again and nobody is told. [Middleware] therefore parks a
// failing job on its last delivery, before the broker archives it, and
// parks a permanently failing job ([handler.Permanent], a decode failure,
// a recovered panic) at once. Parking produces the job to the DLQ topic
// and waits for the broker's acknowledgement; only then does the
// middleware return a [*handler.ParkedError], on which the worker ACCEPTs
// the record and reports the job as parked. When the
// produce fails the middleware returns a [handler.RetryError] with reason
// "dlq-produce" and the worker RELEASEs the record: a job is never
// accepted without having been parked. On the last delivery that RELEASE
// means the broker archives the job; that gap is logged at Error level.
//
// Use it with the worker like this, outside the idempotency middleware
// (the worker recovers panics of the handler and of every middleware, so
// a panic reaches it as a permanent failure with its stack):
//
//	park, err := dlq.Middleware(client, dlq.Redact(scrub))
//	if err != nil {
//		return err
//	}
//	w, err := worker.New(
//		worker.Brokers("127.0.0.1:9092"),
//		worker.Group("thumbnails"),
//		worker.Use(park, claims),
//		worker.Handle("images", resize),
//	)
//
// # The envelope
//
// A DLQ record carries the job's key, value and headers unchanged,
// including its [handler.JobIDHeader] header, followed by envelope headers
// named shareq-dlq-* (see [HeaderReason] and the other Header constants)
// with plain-text values: why the job was parked, the error text (and a
// panic's stack), its delivery count, where it came from, the share
// group, the worker's host, and when it was enqueued, first tried, last
// tried and parked. [Parse] decodes such a record into a [Parked].
//
// Error text is stored in the DLQ topic and read by anyone who can read
// that topic. If handler errors can contain secrets or personal data,
// pass [Redact].
//
// # Reading and replaying
//
// [List] and [Get] read parked jobs; a [Filter] selects them by reason,
// source topic, parked time, text in the error or value, or job ID
// (Filter.JobID: a job's [handler.JobIDHeader], or its source record's
// "topic/partition/offset"). The broker's dead-letter records keep no
// headers: one is found by the job ID of its source record, read back
// from the source topic, or, once retention has deleted that record, by
// its source location only. [ListBackward] reads a big DLQ topic newest
// first, a scan limit of records at most, for a page or a job lookup that
// must not read it whole. [Replay] re-produces selected jobs to
// the topics they came from, at a limited rate, saving its progress as
// offsets committed for a consumer group on the DLQ topic after each
// job's produce is acknowledged. An interrupted replay resumes where it
// stopped without losing a job.
//
// A replayed job goes to the partition [enqueue] would give it
// ([enqueue.Partitioner]), not to the one it was parked from: a job with
// a key to its key's partition, a job without one to the next partition
// of its topic, round-robin. A backlog replayed after an incident is so
// spread over the topic's partitions, and so over the workers, whatever
// the partitioner of the client given to Replay.
//
// Each parked job is replayed once: after its produce is acknowledged,
// Replay writes a replay marker (a record with no key or value and the
// [HeaderReplayedOffset] headers) into the job's own DLQ partition, and a
// later replay, with any filter, passes over jobs that have one unless
// [ReplayForce] is given. A marker always follows the record it
// marks, so reading a partition from an offset to its end finds the
// markers of every record read: [List] and [Get] report each job's
// replays (Parked.Replays), and never show a marker as a job ([Parse]
// returns [ErrMarker] for one). A replay that dies between a job's
// produce and its marker re-produces that one job on the next run, with
// the same job ID, which the idempotency middleware absorbs. The shareq
// CLI wraps these as "shareq dlq list|show|replay".
//
// A DLQ topic is an ordinary topic: create it (with a retention long
// enough for someone to look at its jobs) before the workers start, one
// per source topic by default ("<topic>.dlq", see [TopicSuffix]).
package dlq
