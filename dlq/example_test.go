package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// memoryProducer stands in for a *kgo.Client: it keeps what it is given
// and acknowledges it.
type memoryProducer struct{ records []*kgo.Record }

func (m *memoryProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	var res kgo.ProduceResults
	for _, r := range rs {
		r.Offset = int64(len(m.records))
		m.records = append(m.records, r)
		res = append(res, kgo.ProduceResult{Record: r})
	}
	return res
}

func ExampleMiddleware() {
	prod := &memoryProducer{} // in a worker: the *kgo.Client
	park, err := dlq.Middleware(prod,
		// Error text is stored in the DLQ topic: keep secrets out of it.
		dlq.Redact(func(err error) string { return strings.ReplaceAll(err.Error(), "s3cret", "***") }),
		dlq.OnPark(func(job *handler.Job, reason string) { fmt.Println("parked", job.ID(), "reason", reason) }),
		dlq.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	if err != nil {
		panic(err)
	}
	send := handler.Func(func(ctx context.Context, job *handler.Job) error {
		return handler.Permanent(errors.New("smtp login with password s3cret refused"))
	})
	h := handler.Chain(send, park)

	job := &handler.Job{
		Topic: "emails", Partition: 0, Offset: 7,
		Value:         []byte(`{"to":"ada@example.com"}`),
		Headers:       []handler.Header{{Key: handler.JobIDHeader, Value: []byte("welcome-ada")}},
		DeliveryCount: 1, DeliveryLimit: 5,
	}
	// The middleware returns a *handler.ParkedError: the worker ACCEPTs
	// the job and reports it as parked.
	dl, parked := handler.ParkedOf(h.Handle(context.Background(), job))
	fmt.Println("handler result: parked", parked, "in", dl.Topic, "reason", dl.Reason)

	// What an operator sees when reading the DLQ topic back.
	p, err := dlq.Parse(prod.records[0])
	if err != nil {
		panic(err)
	}
	fmt.Println("dlq topic:", prod.records[0].Topic)
	fmt.Println("reason:", p.Reason)
	fmt.Println("error:", p.Error)
	fmt.Printf("from: %s/%d/%d, delivery %d\n", p.SourceTopic, p.SourcePartition, p.SourceOffset, p.DeliveryCount)
	fmt.Println("job id:", p.JobID())
	fmt.Println("value:", string(p.Value))
	// Output:
	// parked welcome-ada reason permanent
	// handler result: parked true in emails.dlq reason permanent
	// dlq topic: emails.dlq
	// reason: permanent
	// error: permanent failure (permanent): smtp login with password *** refused
	// from: emails/0/7, delivery 1
	// job id: welcome-ada
	// value: {"to":"ada@example.com"}
}

// Replay needs a broker, so this example is compiled but not run.
func ExampleReplay() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	stats, err := dlq.Replay(context.Background(), cl, "emails.dlq",
		dlq.ReplayFilter(dlq.Filter{Reason: handler.ReasonDecode}),
		dlq.ReplayRate(50), // records per second
	)
	if err != nil {
		// Interrupted or failed: the same call resumes where it stopped.
		fmt.Println(err)
	}
	fmt.Printf("replayed %d of %d read; progress in group %s\n", stats.Replayed, stats.Read, stats.Group)
}

// newWorker parks the jobs of a worker, outside its claims (the package
// documentation shows its lines).
func newWorker(client *kgo.Client, claims handler.Middleware, resize handler.Handler, out **worker.Worker) error {
	scrub := func(err error) string { return strings.ReplaceAll(err.Error(), "s3cret", "***") }
	park, err := dlq.Middleware(client, dlq.Redact(scrub))
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers("127.0.0.1:9092"),
		worker.Group("thumbnails"),
		worker.Use(park, claims),
		worker.Handle("images", resize),
	)
	*out = w
	return err
}
