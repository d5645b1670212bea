// Package workerfx runs a shareq worker inside a go.uber.org/fx
// application.
//
// The app supplies a [Config] and its handlers as [Route]s in the
// "shareq.handlers" value group; [Module] builds a *worker.Worker from
// them, starts it when the app starts and stops it gracefully when the app
// stops:
//
//	fx.New(
//		workerfx.Module,
//		fx.Supply(workerfx.Config{
//			Group:   "thumbnails",
//			Brokers: []string{"kafka:9092"},
//		}),
//		fx.Provide(workerfx.AsRoute(newImagesRoute)),    // a constructor returning a workerfx.Route
//		workerfx.Handle("avatars", handler.Func(resize)), // or a handler that needs nothing injected
//
//		// Optional: export metrics (the app owns the registry).
//		fx.Provide(func() prometheus.Registerer { return prometheus.DefaultRegisterer }),
//		// Optional: the logger the worker logs to.
//		fx.Provide(func() *slog.Logger { return slog.Default() }),
//	).Run()
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
// Put worker.RequireTopics("images.dlq") in Config.Options, so a missing
// DLQ topic fails app.Start instead of the first park.
//
// # Lifecycle
//
// OnStart runs the worker's start-up checks (Worker.Check: brokers
// reachable, share groups supported, topics present, group configured)
// within the app's start timeout, so a failed check fails app.Start with
// the reason. It then runs Worker.Run in a goroutine with a context of its
// own and returns. If the worker fails later, the error is logged and the
// app is shut down through fx.Shutdowner with exit code 1, so app.Run
// exits the process with status 1 and app.Wait delivers an
// fx.ShutdownSignal with ExitCode 1.
//
// OnStop cancels the worker's context and waits for Run to return: the
// worker stops polling, lets running handlers finish for up to
// [Config.ShutdownTimeout], acknowledges them and closes its clients.
// fx bounds the wait by its stop timeout (fx.StopTimeout, 15 s by
// default); keep ShutdownTimeout below it (the default,
// [ShutdownTimeoutDefault], is 10 s).
//
// # The outbox relay
//
// [RelayModule] runs a pgoutbox.Relay, which moves the jobs enqueued with
// pgoutbox.EnqueueTx from the outbox table to Kafka, with the app's
// *pgxpool.Pool and *kgo.Client:
//
//	fx.New(
//		fx.Provide(newPool, newKafkaClient), // the app's own
//		workerfx.RelayModule,
//		workerfx.Module, …                   // optional: a worker in the same process
//	)
//
// OnStart checks the outbox table (a missing one fails app.Start) and
// runs the relay in a goroutine; a relay that fails shuts the app down
// with exit code 1; OnStop lets it finish its round. Its metrics go to
// the app's prometheus.Registerer when there is one.
//
// Delivery is at least once: see the handler package for what that means
// for a handler.
package workerfx
