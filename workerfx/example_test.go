package workerfx_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
	"github.com/shareq/shareq/workerfx"
)

// resized tells the example that its job ran.
var resized = make(chan struct{})

// newResizeRoute is an application's route constructor. Its parameters
// (a database pool, a client, *metrics.Metrics for the middleware hooks)
// would be injected by fx.
func newResizeRoute() workerfx.Route {
	return workerfx.Route{
		Topic: "images",
		Handler: handler.Func(func(ctx context.Context, job *handler.Job) error {
			fmt.Printf("resizing %s\n", job.Value)
			close(resized)
			return nil
		}),
	}
}

// An fx application that runs a worker for the topic "images", against an
// in-process kfake cluster standing in for Kafka.
func Example() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "images"), kfake.BrokerConfigs(map[string]string{
		"group.share.heartbeat.interval.ms": "100",
	}))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(context.Background(), &kgo.Record{Topic: "images", Value: []byte("cat.jpg")}).FirstErr(); err != nil {
		panic(err)
	}

	app := fx.New(
		workerfx.Module,
		fx.Supply(workerfx.Config{Options: []worker.Option{
			worker.Group("thumbnails"),
			worker.Brokers(cluster.ListenAddrs()...),
			worker.Concurrency(4),
			worker.AutoOffsetReset("earliest"), // see the job produced before the group existed
		}}),
		fx.Provide(workerfx.AsRoute(newResizeRoute)),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fx.NopLogger,
	)
	// A real app calls app.Run(), which starts, waits for a signal and
	// stops.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	select {
	case <-resized:
	case sig := <-app.Wait():
		fmt.Println("worker failed, exit code", sig.ExitCode)
	case <-ctx.Done():
		fmt.Println("no job within 15s")
	}
	if err := app.Stop(ctx); err != nil {
		panic(err)
	}
	// Output: resizing cat.jpg
}

// Two workers in one app, each a member of its own share group with its
// own concurrency: thumbnails and emails never take each other's slots.
// The app's health check reads each worker's Stopped and Err.
func ExampleNamed() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "images", "emails"), kfake.BrokerConfigs(map[string]string{
		"group.share.heartbeat.interval.ms": "100",
	}))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, r := range []*kgo.Record{{Topic: "images", Value: []byte("cat.jpg")}, {Topic: "emails", Value: []byte("ada@example.com")}} {
		if err := producer.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			panic(err)
		}
	}

	var (
		mu   sync.Mutex
		done []string
		all  = make(chan struct{})
	)
	record := func(what string) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			mu.Lock()
			defer mu.Unlock()
			done = append(done, what+" "+string(job.Value))
			if len(done) == 2 {
				close(all)
			}
			return nil
		})
	}
	type workers struct {
		fx.In
		Thumbnails *worker.Worker `name:"thumbnails"`
		Mailer     *worker.Worker `name:"mailer"`
	}
	var ws workers
	app := fx.New(
		workerfx.Named("thumbnails", worker.Group("thumbnails"), worker.Brokers(seeds...), worker.AutoOffsetReset("earliest")),
		workerfx.HandleFor("thumbnails", "images", record("resized")),
		workerfx.Named("mailer", worker.Group("mailer"), worker.Brokers(seeds...), worker.AutoOffsetReset("earliest"), worker.Concurrency(50)),
		workerfx.HandleFor("mailer", "emails", record("mailed")),
		fx.Populate(&ws),
		fx.Supply(slog.New(slog.DiscardHandler)),
		fx.NopLogger,
	)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	select {
	case <-all:
	case <-ws.Mailer.Stopped():
		fmt.Println("the mailer stopped:", ws.Mailer.Err())
	case <-ctx.Done():
		fmt.Println("not every job ran within 15s")
	}
	if err := app.Stop(ctx); err != nil {
		panic(err)
	}
	<-ws.Thumbnails.Stopped() // closed once Run has returned
	fmt.Println("thumbnails stopped, error:", ws.Thumbnails.Err())
	mu.Lock()
	slices.Sort(done)
	fmt.Println(done)
	mu.Unlock()
	// Output:
	// thumbnails stopped, error: <nil>
	// [mailed ada@example.com resized cat.jpg]
}

// The package documentation's app, compiled here.
func thumbnailsApp(newImagesRoute any, resize handler.Func) {
	app := fx.New(
		workerfx.Module,
		fx.Supply(workerfx.Config{Options: []worker.Option{
			worker.Group("thumbnails"),
			worker.Brokers("kafka:9092"),
			worker.Concurrency(16),
			worker.RequireTopics("images.dlq"), // a missing DLQ topic fails app.Start
		}}),
		fx.Provide(workerfx.AsRoute(newImagesRoute)),     // a constructor returning a workerfx.Route
		workerfx.Handle("avatars", handler.Func(resize)), // or a handler that needs nothing injected

		// Optional: export metrics (the app owns the registry).
		fx.Provide(func() prometheus.Registerer { return prometheus.DefaultRegisterer }),
		// Optional: the logger the worker logs to.
		fx.Provide(func() *slog.Logger { return slog.Default() }),
	)
	app.Run()
}

// The package documentation's two workers, compiled here.
func twoWorkersApp(resize handler.Func, sendEmail func(context.Context, *handler.Job, string) error) *fx.App {
	app := fx.New(
		workerfx.Named("thumbnails", worker.Group("thumbnails"), worker.Brokers("kafka:9092")),
		workerfx.HandleFor("thumbnails", "images", handler.Func(resize)),

		workerfx.Named("mailer", worker.Group("mailer"), worker.Brokers("kafka:9092"), worker.Concurrency(50)),
		workerfx.HandleFor("mailer", "emails", handler.JSON(sendEmail)),
	)
	return app
}

type image struct{ ID string }

func resizeImage(ctx context.Context, job *handler.Job, img image) error { return nil }

// newImagesRoute is the package documentation's route constructor.
func newImagesRoute(cl *kgo.Client, store idempotency.Store, m *metrics.Metrics) (workerfx.Route, error) {
	park, err := dlq.Middleware(cl)
	if err != nil {
		return workerfx.Route{}, err
	}
	claim, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
	if err != nil {
		return workerfx.Route{}, err
	}
	return workerfx.Route{Topic: "images", Handler: handler.JSON(resizeImage), Middleware: []handler.Middleware{park, claim}}, nil
}

// The package documentation's health handler, compiled here.
func healthApp(opts []worker.Option) *fx.App {
	app := fx.New(
		workerfx.Module,
		fx.Supply(workerfx.Config{Options: opts}),
		workerfx.HealthModule,
		fx.Provide(http.NewServeMux), // the app's own mux and server
		fx.Invoke(func(mux *http.ServeMux, h *workerfx.Health) { mux.Handle("/healthz", h) }),
	)
	return app
}

// The package documentation's lag collector, compiled here.
func lagApp(opts []worker.Option, newAdminClient func(*kgo.Client) *kadm.Client) *fx.App {
	app := fx.New(
		workerfx.Module,
		fx.Supply(workerfx.Config{Options: opts}),
		fx.Provide(func() prometheus.Registerer { return prometheus.DefaultRegisterer }),
		fx.Provide(newAdminClient),                // the app's *kadm.Client
		workerfx.Lag(metrics.LagTopics("images")), // a lag before the first worker joins
	)
	return app
}
