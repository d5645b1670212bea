// Package outboxfx runs a transactional outbox relay (package
// enqueue/pgoutbox) inside a go.uber.org/fx application: [Module] moves
// the jobs enqueued with pgoutbox.EnqueueTx from the outbox table to
// Kafka, with the app's *pgxpool.Pool and *kgo.Client (created with
// enqueue.ProducerOpts, so that keyless jobs spread over the partitions;
// app.Start fails with enqueue.ErrStickyPartitioner otherwise):
//
//	app := fx.New(
//		fx.Provide(newPool, newKafkaClient), // the app's own
//		outboxfx.Module,
//	)
//
// and, for a worker in the same process, workerfx.Module with its Config
// and routes. OnStart checks the outbox table (a missing one fails
// app.Start) and runs the relay in a goroutine; a relay that fails shuts
// the app down with exit code 1; OnStop lets it finish its round. Its
// metrics (package metrics/outboxmetrics) go to the app's
// prometheus.Registerer when there is one.
//
// It is a module of its own, github.com/shareq/shareq/workerfx/outboxfx,
// so that an fx app with workers only (package workerfx) does not depend
// on pgx and the outbox.
//
// Delivery is at least once: a relay that stops between the broker's
// acknowledgement and its delete produces those jobs again, with the same
// job IDs (see package enqueue/pgoutbox).
package outboxfx
