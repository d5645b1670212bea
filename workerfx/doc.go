// Package workerfx runs shareq workers inside a go.uber.org/fx
// application.
//
// The app supplies a [Config], whose Options are the worker package's own
// options (package worker documents each, with its default), and its
// handlers as [Route]s in the "shareq.handlers" value group; [Module]
// builds a *worker.Worker from them, starts it when the app starts and
// stops it gracefully when the app stops:
//
//	app := fx.New(
//		workerfx.Module,
//		fx.Supply(workerfx.Config{Options: []worker.Option{
//			worker.Group("thumbnails"),
//			worker.Brokers("kafka:9092"),
//			worker.Concurrency(16),
//			worker.RequireTopics("images.dlq"), // a missing DLQ topic fails app.Start
//		}}),
//		fx.Provide(workerfx.AsRoute(newImagesRoute)),     // a constructor returning a workerfx.Route
//		workerfx.Handle("avatars", handler.Func(resize)), // or a handler that needs nothing injected
//
//		// Optional: export metrics (the app owns the registry).
//		fx.Provide(func() prometheus.Registerer { return prometheus.DefaultRegisterer }),
//		// Optional: the logger the worker logs to.
//		fx.Provide(func() *slog.Logger { return slog.Default() }),
//	)
//	app.Run()
//
// The module stays thin: it provides the worker and its metrics and
// nothing the app owns. The app's Kafka client, database pool, registry
// and logger come from the app; a prometheus.Registerer and an
// *slog.Logger are used when provided and not required.
//
// # Metrics and middleware hooks
//
// The module provides a *metrics.Metrics. When the app provides a
// prometheus.Registerer it is registered there and is the worker's
// observer. A route constructor may take it to count parked jobs and
// suppressed duplicates:
//
//	func newImagesRoute(cl *kgo.Client, pool *pgxpool.Pool, m *metrics.Metrics) (workerfx.Route, error) {
//		park, err := dlq.Middleware(cl, dlq.OnPark(m.Parked))
//		if err != nil {
//			return workerfx.Route{}, err
//		}
//		store, err := pgstore.New(pool)
//		if err != nil {
//			return workerfx.Route{}, err
//		}
//		claim, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
//		if err != nil {
//			return workerfx.Route{}, err
//		}
//		return workerfx.Route{Topic: "images", Handler: handler.JSON(resizeImage), Middleware: []handler.Middleware{park, claim}}, nil
//	}
//
// # More than one worker
//
// [Named] adds a worker with a name of its own: its options (given to
// Named, and in a Config of that name, see [SupplyConfig] and
// [ConfigFor]), its routes ([HandleFor], [AsRouteFor]), and its
// *worker.Worker and *metrics.Metrics, provided under its name (the fx tag
// `name:"mailer"`). Each worker is a member of its own share group with
// its own concurrency, so a slow kind of job never takes the slots of
// another:
//
//	app := fx.New(
//		workerfx.Named("thumbnails", worker.Group("thumbnails"), worker.Brokers("kafka:9092")),
//		workerfx.HandleFor("thumbnails", "images", handler.Func(resize)),
//
//		workerfx.Named("mailer", worker.Group("mailer"), worker.Brokers("kafka:9092"), worker.Concurrency(50)),
//		workerfx.HandleFor("mailer", "emails", handler.JSON(sendEmail)),
//	)
//
// [Module] and Named mix: in an app with more than one worker, the
// metrics of each carry the constant label worker=<name> (worker="" for
// Module's, which Prometheus reads as no label), so that they share the
// app's registry.
//
// # Lifecycle and health
//
// OnStart runs the worker's start-up checks (Worker.Check: brokers
// reachable, share groups supported, topics present, group configured)
// within the app's start timeout, so a failed check fails app.Start with
// the reason. It then runs Worker.Run in a goroutine with a context of its
// own and returns. A worker that stops for good while the app runs (Run
// returns before OnStop asked it to) is not restarted: the error is
// logged and the app is shut down through fx.Shutdowner with exit code 1,
// so app.Run exits the process with status 1 and app.Wait delivers an
// fx.ShutdownSignal with ExitCode 1. The app's own health checks can watch
// the provided *worker.Worker: its Stopped channel is closed when the
// worker has stopped for good, and its Err method says why (nil after a
// graceful stop).
//
// OnStop cancels the worker's context and waits for Run to return: the
// worker stops polling, lets running handlers finish for up to its
// worker.ShutdownTimeout, acknowledges them and closes its clients. fx
// bounds the wait by its stop timeout (fx.StopTimeout, 15 s by default);
// keep the shutdown timeout below it (the module's default,
// [ShutdownTimeoutDefault], is 10 s).
//
// # The outbox relay
//
// [RelayModule] runs a pgoutbox.Relay, which moves the jobs enqueued with
// pgoutbox.EnqueueTx from the outbox table to Kafka, with the app's
// *pgxpool.Pool and *kgo.Client (created with enqueue.ProducerOpts, so
// that keyless jobs spread over the partitions; app.Start fails with
// enqueue.ErrStickyPartitioner otherwise):
//
//	app := fx.New(
//		fx.Provide(newPool, newKafkaClient), // the app's own
//		workerfx.RelayModule,
//	)
//
// and, for a worker in the same process, workerfx.Module with its Config
// and routes as above. OnStart checks the outbox table (a missing one
// fails app.Start) and runs the relay in a goroutine; a relay that fails
// shuts the app down with exit code 1; OnStop lets it finish its round.
// Its metrics go to the app's prometheus.Registerer when there is one.
//
// Delivery is at least once: see the handler package for what that means
// for a handler.
package workerfx
