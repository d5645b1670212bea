package outboxfx_test

import (
	"context"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/workerfx/outboxfx"
)

// An fx application that relays the jobs its handlers enqueue with
// pgoutbox.EnqueueTx. The app owns the pool and the Kafka client;
// Module runs the relay between app start and stop.
func ExampleModule() {
	app := fx.New(
		fx.Provide(func(lc fx.Lifecycle) (*pgxpool.Pool, error) {
			pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
			if err == nil {
				lc.Append(fx.StopHook(pool.Close))
			}
			return pool, err
		}),
		fx.Provide(func(lc fx.Lifecycle) (*kgo.Client, error) {
			cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"), kgo.RecordPartitioner(enqueue.Partitioner()))
			if err == nil {
				lc.Append(fx.StopHook(cl.Close))
			}
			return cl, err
		}),
		outboxfx.Module,
	)
	app.Run()
}

func newPool(lc fx.Lifecycle) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err == nil {
		lc.Append(fx.StopHook(pool.Close))
	}
	return pool, err
}

func newKafkaClient(lc fx.Lifecycle) (*kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err == nil {
		lc.Append(fx.StopHook(cl.Close))
	}
	return cl, err
}

// The package documentation's relay app, compiled here.
func relayApp() *fx.App {
	app := fx.New(
		fx.Provide(newPool, newKafkaClient), // the app's own
		outboxfx.Module,
	)
	return app
}
