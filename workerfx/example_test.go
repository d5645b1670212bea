package workerfx_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/workerfx"
)

// resized tells the example that its job ran.
var resized = make(chan struct{})

// newImagesRoute is an application's route constructor. Its parameters
// (a database pool, a client, *metrics.Metrics for the middleware hooks)
// would be injected by fx.
func newImagesRoute() workerfx.Route {
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
		fx.Supply(workerfx.Config{
			Group:           "thumbnails",
			Brokers:         cluster.ListenAddrs(),
			Concurrency:     4,
			AutoOffsetReset: "earliest", // see the job produced before the group existed
		}),
		fx.Provide(workerfx.AsRoute(newImagesRoute)),
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
