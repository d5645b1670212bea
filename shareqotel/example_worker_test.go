package shareqotel_test

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// docs/tracing.md's snippet: a traced producer and worker on the global
// providers (set them with otel.SetTracerProvider, otel.SetMeterProvider
// and otel.SetTextMapPropagator at start-up).
func Example_worker() {
	var producer *kgo.Client // your producer, made with enqueue.ProducerOpts()
	var resize handler.Handler
	_ = readmeWorker(producer, resize)
}

func readmeWorker(producer *kgo.Client, resize handler.Handler) error {
	tel, err := shareqotel.New() // the global tracer and meter providers and propagator
	if err != nil {
		return err
	}
	q, err := enqueue.New(tel.Producer(producer)) // a "send" span per job, its context in the headers
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers("127.0.0.1:9092"),
		worker.Group("thumbnails"),
		worker.Handle("images", resize),
		worker.Use(tel.Middleware()), // outermost: a "process" span per run
		worker.Observers(tel),        // ended with the outcome and the ack
	)
	_, _ = q, w
	return err
}
