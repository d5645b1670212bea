package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

func resize(ctx context.Context, job *handler.Job) error { return nil }

// The worker metrics as the worker's observer, and as the hooks of the dlq
// and idempotency middleware so that parked jobs and suppressed
// duplicates are counted too.
func ExampleNew() {
	reg := prometheus.NewRegistry() // the application's registry
	m, err := metrics.New(reg)
	if err != nil {
		panic(err)
	}

	// The application's client, for parking jobs.
	producer, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	park, err := dlq.Middleware(producer)
	if err != nil {
		panic(err)
	}
	claim, err := idempotency.Middleware(idempotency.NewMemoryStore(), idempotency.OnDuplicate(m.Duplicate))
	if err != nil {
		panic(err)
	}

	w, err := worker.New(
		worker.Brokers("localhost:9092"),
		worker.Group("thumbnails"),
		worker.Handle("images", handler.Func(resize), park, claim),
		worker.Observers(m),
	)
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// go http.ListenAndServe(":9100", mux); w.Run(ctx)
	fmt.Println(w.Group(), w.Topics())
	// Output: thumbnails [images]
}

// Export the backlog of the share group "thumbnails" for dashboards and
// autoscaling. The collector asks the broker when Prometheus scrapes, at
// most every 10 seconds here.
func ExampleNewLagCollector() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("localhost:9092"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(kadm.NewClient(cl), "thumbnails",
		metrics.LagTopics("thumbnails"), // the group reads from earliest: count partitions it has not started on
		metrics.LagMinInterval(10*time.Second),
		metrics.LagTimeout(3*time.Second),
	))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// http.ListenAndServe(":9100", nil)
}

// newWorker wires the metrics into a worker and the dlq and idempotency
// middleware (the package documentation shows its lines).
func newWorker(producer *kgo.Client, store idempotency.Store, out **worker.Worker) error {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	park, err := dlq.Middleware(producer)
	if err != nil {
		return err
	}
	claim, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers("localhost:9092"),
		worker.Group("thumbnails"),
		worker.Handle("images", handler.Func(resize), park, claim),
		worker.Observers(m),
	)
	*out = w
	return err
}
