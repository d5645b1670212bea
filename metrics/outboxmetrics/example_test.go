package outboxmetrics_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/metrics/outboxmetrics"
	"github.com/shareq/shareq/scheduler"
)

// Export a relay's counters and the outbox table's backlog.
func ExampleNewCollector() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	relay, err := pgoutbox.NewRelay(pool, cl)
	if err != nil {
		log.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxmetrics.NewCollector(relay))
	// Serve reg on /metrics, and run the relay: relay.Run(ctx).
}

// Export a periodic scheduler's counters.
func ExampleNewSchedulerCollector() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	sched, err := scheduler.New(pool, scheduler.App("billing"), scheduler.Add(scheduler.Schedule{
		Name: "invoices", Spec: scheduler.MustParseCron("0 3 * * *"), Topic: "invoices", Value: struct{}{},
	}))
	if err != nil {
		log.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(outboxmetrics.NewSchedulerCollector(sched))
	// Serve reg on /metrics, and run the scheduler: sched.Run(ctx).
}
