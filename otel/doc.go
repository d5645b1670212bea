// Package shareqotel follows shareq's jobs with OpenTelemetry, from the
// request that enqueued a job to each of its runs: trace context
// propagation through the job's headers, spans after the messaging
// semantic conventions for Kafka, and the conventions' metrics.
//
// It is a module of its own (github.com/shareq/shareq/otel), on the
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
// the Telemetry itself as the worker's observer (worker.WithObserver)
// give each run of a job a CONSUMER span "process <topic>" with
// messaging.system=kafka, the topic, the share group, the partition, the
// offset, the job ID (messaging.message.id), the delivery count and (with
// [RecordKeys]) the key. It links to the job's creation context (or is
// its child, with [ParentFromJob]) and, for a job replayed from a
// dead-letter topic, to the run that parked it. It ends when the worker
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
// OTEL_SEMCONV_STABILITY_OPT_IN selects the attributes' names as the
// conventions say: by default those of semconv v1.24 (what other Kafka
// instrumentations emit), "messaging" for the current ones, and
// "messaging/dup" for both ([SemanticConventions] sets it in code).
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
