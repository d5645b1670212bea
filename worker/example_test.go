package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/devbroker"
	"github.com/shareq/shareq/worker"
)

// A worker that sends emails. The example runs against an in-process
// broker; in production pass worker.Brokers the addresses of an Apache
// Kafka 4.2+ cluster.
func Example() {
	broker, err := devbroker.Start(0, 3, "emails")
	if err != nil {
		panic(err)
	}
	defer broker.Close()
	seeds := broker.ListenAddrs()

	// Enqueue three jobs.
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	for _, to := range []string{"ada", "grace", "linus"} {
		rec := &kgo.Record{Topic: "emails", Value: []byte(`{"to":"` + to + `"}`)}
		if err := producer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			panic(err)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var sent []string
	send := handler.JSON(func(ctx context.Context, job *handler.Job, e struct{ To string }) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, e.To)
		if len(sent) == 3 {
			stop() // a real worker runs until it is told to stop
		}
		return nil
	})

	w, err := worker.New(
		worker.Brokers(seeds...),
		worker.Group("mailer"),
		worker.Handle("emails", send),
		worker.Concurrency(4),
		worker.AutoOffsetReset("earliest"), // see jobs enqueued before the group existed
		worker.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil { // blocks until ctx is cancelled
		panic(err)
	}
	slices.Sort(sent)
	fmt.Println("sent:", sent)
	// Output: sent: [ada grace linus]
}
