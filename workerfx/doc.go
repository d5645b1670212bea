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
// observer. A route constructor may take it to count suppressed
// duplicates (here with an idempotency.Store the app provides,
// such as a pgstore.Store on its pool):
//
//	func newImagesRoute(cl *kgo.Client, store idempotency.Store, m *metrics.Metrics) (workerfx.Route, error) {
//		park, err := dlq.Middleware(cl)
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
// # Share-group lag
//
// [Lag] registers a metrics.LagCollector for the worker's share group
// with the app's registerer, read through the app's *kadm.Client at
// scrape time: shareq_share_group_lag_total{group,topic}, the backlog
// KEDA scales workers on (metrics/keda-example.yaml). The module provides
// neither the registerer nor the admin client:
//
//	app := fx.New(
//		workerfx.Module,
//		fx.Supply(workerfx.Config{Options: opts}),
//		fx.Provide(func() prometheus.Registerer { return prometheus.DefaultRegisterer }),
//		fx.Provide(newAdminClient),                // the app's *kadm.Client
//		workerfx.Lag(metrics.LagTopics("images")), // a lag before the first worker joins
//	)
//
// [LagFor] does the same for a worker of [Named].
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
// [HealthModule] provides a *[Health], an http.Handler the app mounts on
// its own server: it serves every worker's state as JSON ([HealthReport]:
// starting, running, or stopped with Worker.Err), with status 200 when
// all run and 503 otherwise, for a readiness probe:
//
//	app := fx.New(
//		workerfx.Module,
//		fx.Supply(workerfx.Config{Options: opts}),
//		workerfx.HealthModule,
//		fx.Provide(http.NewServeMux), // the app's own mux and server
//		fx.Invoke(func(mux *http.ServeMux, h *workerfx.Health) { mux.Handle("/healthz", h) }),
//	)
//
// The app's workers stop together. fx runs the OnStop hooks one after
// another, in reverse order; the first worker's hook cancels the context
// of every worker of the app ([Module]'s and [Named]'s), so that each
// stops polling, lets its running handlers finish for up to its
// worker.ShutdownTimeout, acknowledges them, leaves its group and closes
// its clients, all at the same time; each worker's hook then waits for
// its own Run to return. fx bounds the whole stop, every hook of the app
// together, by its stop timeout (fx.StopTimeout, 15 s by default). Keep
// it above the longest worker.ShutdownTimeout of the app's workers (one,
// however many workers there are) plus the acknowledgements and the
// leave (a fraction of a second on brokers that answer, up to 3 s each
// when they do not) and the time the app's other OnStop hooks take. The
// module's default ShutdownTimeout, [ShutdownTimeoutDefault], is 10 s,
// which leaves 5 s of fx's default. A worker still stopping when the stop
// timeout passes makes app.Stop return an error naming it (raise
// fx.StopTimeout or lower worker.ShutdownTimeout); it still stops by
// itself, its handlers cancelled at its ShutdownTimeout.
//
// # The outbox relay
//
// The outbox relay's fx module is in a module of its own,
// github.com/shareq/shareq/workerfx/outboxfx (outboxfx.Module), so that
// this one does not depend on pgx.
//
// Delivery is at least once: see the handler package for what that means
// for a handler.
package workerfx
