package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// A worker that sends emails. The example runs against an in-process
// broker (franz-go's kfake, as shareq dev does); in production pass
// worker.Brokers the addresses of an Apache Kafka 4.2+ cluster.
func Example() {
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "emails"))
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

// A worker that leaves spare deliveries between the one a failing job is
// parked on and the one the broker archives it on, so that a worker killed
// while it parks a job loses nothing.
func ExampleSpareDeliveries() {
	send := handler.Func(func(ctx context.Context, job *handler.Job) error { return nil })
	w, err := worker.New(
		worker.Brokers("127.0.0.1:9092"),
		worker.Group("mailer"),
		worker.Handle("emails", send),
		worker.DeliveryLimit(10),  // the broker archives after 10 deliveries
		worker.SpareDeliveries(5), // jobs (and the dlq middleware) treat the 5th as the last
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(w.Group(), w.Topics())
	// Output: mailer [emails]
}

// A worker of two topics, where a password reset never waits behind a
// newsletter: it fetches and starts newsletters only while no reset
// waits (docs/limits.md, Priorities).
func ExampleStrictPriority() {
	resets := handler.Func(func(ctx context.Context, job *handler.Job) error { return nil })
	newsletters := handler.Func(func(ctx context.Context, job *handler.Job) error { return nil })
	w, err := worker.New(
		worker.Brokers("127.0.0.1:9092"),
		worker.Group("mailer"),
		worker.Handle("password-resets", resets),
		worker.Handle("newsletters", newsletters),
		worker.StrictPriority("password-resets", "newsletters"), // or:
		// worker.Priority("password-resets", 3), // 3 resets started for each newsletter
	)
	if err != nil {
		panic(err)
	}
	fmt.Println(w.Group(), len(w.Topics()), "topics")
	// Output: mailer 2 topics
}

// A worker that inserts rows a hundred at a time (docs/handlers.md, Jobs
// in batches): each job of a batch holds its own slot, so Concurrency is
// at least the batch's size.
func Example_batch() {
	brokers := []string{"127.0.0.1:9092"}
	insert := handler.Batch(100, 50*time.Millisecond, func(ctx context.Context, jobs []*handler.Job) []error {
		errs := make([]error, len(jobs))
		// Insert the rows in one statement; a row that cannot ever fit is
		// errs[i] = handler.Permanent(err): rejected (or parked) alone.
		return errs
	})
	w, err := worker.New(worker.Brokers(brokers...), worker.Group("bulk"),
		worker.Handle("rows", insert), worker.Concurrency(200))
	if err != nil {
		panic(err)
	}
	fmt.Println(w.Group(), w.Topics())
	// Output: bulk [rows]
}
