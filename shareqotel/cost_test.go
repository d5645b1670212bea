package shareqotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shareq/shareq/handler"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/worker"
)

// BenchmarkJobTelemetry measures the telemetry's own work per job, with
// no broker and no worker: what the worker calls for one no-op job (the
// observer's JobStarted, the middleware around the handler, JobFinished),
// on one goroutine, in the modes of BenchmarkMiddleware, and sampling
// off with LinkToJob (each run a root, which reads the job's trace
// context only for a span that records). Its ns/op and allocs/op are the
// middleware's cost alone, which a machine shared with other work moves
// less than it moves a worker's rate.
//
//	go test -run '^$' -bench JobTelemetry -benchmem ./shareqotel
func BenchmarkJobTelemetry(b *testing.B) {
	for _, mode := range []string{"none", "sampling-off", "sampling-off-no-meter", "sampling-off-LinkToJob", "sampled"} {
		b.Run(mode, func(b *testing.B) {
			nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
			h := handler.Handler(nop)
			var tel *shareqotel.Telemetry
			if mode != "none" {
				sampler := sdktrace.NeverSample()
				if mode == "sampled" {
					sampler = sdktrace.AlwaysSample()
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sampler)), sdktrace.WithSpanProcessor(dropSpans{}))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
				var meter shareqotel.Option = shareqotel.MeterProvider(mp)
				if mode == "sampling-off-no-meter" {
					meter = shareqotel.MeterProvider(noop.NewMeterProvider())
				}
				opts := []shareqotel.Option{shareqotel.TracerProvider(tp), meter, shareqotel.Propagator(propagation.TraceContext{})}
				if mode == "sampling-off-LinkToJob" {
					opts = append(opts, shareqotel.LinkToJob())
				}
				var err error
				if tel, err = shareqotel.New(opts...); err != nil {
					b.Fatal(err)
				}
				h = handler.Chain(nop, tel.Middleware())
			}
			ctx := context.Background()
			job := &handler.Job{Topic: "jobs", Group: "workers", Partition: 3, DeliveryCount: 1, Timestamp: time.Now(),
				Headers: []handler.Header{{Key: "traceparent", Value: traceparent(mode == "sampled")}}}
			res := worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Ran: true, Final: true}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				job.Offset = int64(i)
				if tel != nil {
					tel.JobStarted(job)
				}
				if err := h.Handle(ctx, job); err != nil {
					b.Fatal(err)
				}
				if tel != nil {
					tel.JobFinished(job, res)
				}
			}
		})
	}
}
