package enqueue_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
)

func Example() {
	// An in-process broker with an "emails" topic stands in for Kafka.
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "emails"))
	if err != nil {
		panic(err)
	}
	defer fake.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	type Email struct {
		To string `json:"to"`
	}
	q, err := enqueue.New(cl)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id, err := q.Enqueue(ctx, "emails", Email{To: "ada@example.com"}, enqueue.ID("welcome-ada"))
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued", id)

	ids, err := q.EnqueueMany(ctx,
		enqueue.NewJob("emails", Email{To: "grace@example.com"}),
		enqueue.NewJob("emails", Email{To: "alan@example.com"}))
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued", len(ids), "more, with fresh IDs")
	// Output:
	// enqueued welcome-ada
	// enqueued 2 more, with fresh IDs
}

// Email is the payload of a job on the "emails" topic.
type Email struct {
	To string `json:"to"`
}

// welcome enqueues one job (the package documentation and
// docs/enqueueing.md show its lines).
func welcome(ctx context.Context, cl *kgo.Client, out *string) error {
	q, err := enqueue.New(cl)
	if err != nil {
		return err
	}
	id, err := q.Enqueue(ctx, "emails", Email{To: "ada@example.com"})
	// enqueue.ID("welcome/ada"), enqueue.Key(...), enqueue.Header(...);
	// q.EnqueueMany(ctx, jobs...) for a batch.
	*out = id
	return err
}

// newProducer creates the client a producer of jobs enqueues with
// (docs/enqueueing.md shows its line): keyless jobs spread over the partitions.
func newProducer(brokers []string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(enqueue.Partitioner()))
	return cl, err
}

// newProducerWithOpts is newProducer with every option shareq needs (the
// documentation of ProducerOpts shows its line).
func newProducerWithOpts(brokers []string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, enqueue.ProducerOpts()...)...)
	return cl, err
}
