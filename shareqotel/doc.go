// Package shareqotel follows shareq's jobs with OpenTelemetry, from the
// request that enqueued a job to each of its runs: trace context
// propagation through the job's headers, spans after the messaging
// semantic conventions for Kafka, and the conventions' metrics.
//
// It is a module of its own (github.com/shareq/shareq/shareqotel), on the
// OpenTelemetry API only: a worker that does not import it pays nothing.
// The tracer provider, meter provider and propagator are the globals
// unless given to [New].
//
// # Producing
//
// [Telemetry.Producer] wraps the producer of an enqueue.Client, of the
// outbox relay and of the dlq middleware: a PRODUCER span "send <topic>"
// per record, and the record's headers carry the trace context through the
// propagator (W3C traceparent and tracestate with
// propagation.TraceContext). For the outbox, [Telemetry.Inject] is the
// option to pass to pgoutbox.EnqueueTx: a PRODUCER span "create <topic>"
// whose context the row keeps and the relay produces, so that the trace
// crosses the transaction and the relay; the relay's send span links to
// it.
//
// # Consuming
//
// [Telemetry.Middleware], the outermost middleware of worker.Use, and
// the Telemetry itself as the worker's observer (worker.Observers)
// give each run of a job a CONSUMER span "process <topic>" with
// messaging.system=kafka, the topic, the share group, the partition, the
// offset, the job ID (messaging.message.id), the delivery count and (with
// [RecordKeys]) the key. It is a child of the job's creation context and
// links to it (see below) and, for a job replayed from a dead-letter
// topic, links to the run that parked it. It ends when the worker
// acknowledged the record, with:
//
//   - shareq.job.outcome: succeeded, retried, parked, discarded,
//     interrupted or cancelled, and shareq.job.timed_out for a job that
//     ran out of its time;
//   - an error status, error.type and the error (with its stack for a
//     panic) only for a job that failed: retried, parked or discarded;
//   - an event shareq.ack with the acknowledgement sent (accept, release,
//     reject), and an event per renewal of the record's lock.
//
// A run that the worker gave back before its handler started gets a span
// too. The handler's context carries the span, and a logger
// (handler.Logger) with trace_id and span_id when the span is sampled.
//
// # One trace or one per run
//
// By default a job's runs are in the trace of the request that enqueued
// it: each run's span is a child of the job's creation context (the
// "send" span of [Telemetry.Producer], or the "create" span of
// [Telemetry.Inject]) and also links to it. Whoever looks at a request in
// a trace viewer then sees the jobs it enqueued run under it, each
// delivery a run of its own, retries included; and under a parent-based
// sampler (the SDK's default) a job's runs are sampled when its request
// was. The messaging conventions allow it for a span that processes a
// single message, which a run is; they default to a link alone because
// a consumer that processes batches cannot have one parent per message.
//
// [LinkToJob] makes each run the root of a trace of its own, linked to
// the creation context, as the conventions' default and River's otelriver
// do. Choose it when a request enqueues many jobs (one trace would hold
// all their runs), when jobs run long after their request (a scheduled
// job, a replay from a dead-letter topic: the trace grows for hours, and
// a tail-based sampler has decided on it long before), or to sample runs
// on their own. A job that carries no trace context (written by a
// producer that is not traced) runs in a trace of its own either way;
// the span that the context the worker runs in holds is never a run's
// parent.
//
// # Semantic conventions
//
// The spans follow the current messaging conventions by default: span
// names "<operation> <topic>" ("create", "send", "process") and
// attributes messaging.operation.name and .type,
// messaging.consumer.group.name, messaging.destination.partition.id,
// messaging.kafka.offset. OTEL_SEMCONV_STABILITY_OPT_IN=messaging/dup
// adds the attributes of semconv v1.24 beside them (messaging.operation,
// messaging.kafka.consumer.group, ...), the span names staying the
// current ones; [SemanticConventions]([SemconvOld]) gives semconv v1.24
// alone, span names "<topic> <operation>" with send called publish
// ("<topic> publish"), as other Kafka instrumentations emit by default.
//
// # Metrics
//
//   - messaging.process.duration (s): how long handlers ran;
//   - messaging.client.consumed.messages: finished deliveries;
//   - shareq.job.wait (s): from a job's record timestamp to the start of
//     its first delivery.
//
// Each has messaging.system, messaging.operation.name,
// messaging.destination.name and messaging.consumer.group.name; the first
// two error.type for a failure, and the consumed count shareq.job.outcome.
// The duration is measured by the middleware, on the handler's goroutine,
// so that the worker's own loop only counts. The Prometheus metrics of
// package metrics are independent of these.
package shareqotel
