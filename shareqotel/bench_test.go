package shareqotel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	shareqotel "github.com/shareq/shareq/shareqotel"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// BenchmarkMiddleware measures the cost per job of the telemetry: a
// no-op handler at Concurrency 24 without it, with it on an SDK tracer
// provider that samples nothing (with an SDK meter provider, so metrics
// are recorded, and with a no-op one, as an app that set none has), and
// with every span sampled (into a processor that drops them), in the
// same run. Each sub-benchmark consumes b.N fresh
// 100-byte records from 6 partitions carrying a trace context (of a
// sampled span in the sampled mode, else of one not sampled: a run is
// its child and follows it under a parent-based sampler), and
// reports jobs/s, the process's CPU time per job (cpu-ns/job: user and
// system, kfake's included; on a machine shared with other work it moves
// less than the rate does) and their ratios to the run without
// telemetry.
//
//	SHAREQ_TEST_BROKERS=kfake go test -run '^$' -bench Middleware -benchtime 50000x ./shareqotel
func BenchmarkMiddleware(b *testing.B) {
	var base, baseCPU float64
	// Rounds of the three, each compared with the run without telemetry
	// just before it: a machine whose load drifts moves them together.
	for round := range 3 {
		for _, mode := range []string{"none", "sampling-off", "sampling-off-no-meter", "sampled"} {
			benchMode(b, round, mode, &base, &baseCPU)
		}
	}
}

func benchMode(b *testing.B, round int, mode string, base, baseCPU *float64) {
	b.Run(fmt.Sprintf("%s/concurrency=24/round=%d", mode, round+1), func(b *testing.B) {
		var opts []worker.Option
		if mode != "none" {
			sampler := sdktrace.NeverSample()
			if mode == "sampled" {
				sampler = sdktrace.AlwaysSample()
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sampler)), sdktrace.WithSpanProcessor(dropSpans{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
			var meter shareqotel.Option = shareqotel.MeterProvider(mp)
			if mode == "sampling-off-no-meter" { // what an app without an OTel meter provider gets
				meter = shareqotel.MeterProvider(noop.NewMeterProvider())
			}
			tel, err := shareqotel.New(shareqotel.TracerProvider(tp), meter, shareqotel.Propagator(propagation.TraceContext{}))
			if err != nil {
				b.Fatal(err)
			}
			opts = append(opts, worker.Use(tel.Middleware()), worker.Observers(tel))
		}
		c := kafkatest.New(b)
		topic, group := c.Topic(b, 6), c.Group(b)
		produce(b, c, topic, mode == "sampled")
		var done atomic.Int64
		all := make(chan struct{})
		nop := handler.Func(func(context.Context, *handler.Job) error {
			if done.Add(1) == int64(b.N) {
				close(all)
			}
			return nil
		})
		w, err := worker.New(append(opts, worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
			worker.Concurrency(24), worker.Logger(shareqtest.Logger()))...)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		b.ResetTimer()
		start, cpu0 := time.Now(), cpuTime(b)
		go func() { ran <- w.Run(ctx) }()
		select {
		case <-all:
		case <-time.After(10 * time.Minute):
			b.Errorf("done %d of %d in 10 minutes", done.Load(), b.N)
		}
		rate := float64(b.N) / time.Since(start).Seconds()
		cpu := float64(cpuTime(b)-cpu0) / float64(b.N)
		b.StopTimer()
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate, "jobs/s")
		b.ReportMetric(cpu, "cpu-ns/job")
		if mode == "none" {
			*base, *baseCPU = rate, cpu
		} else if *base > 0 {
			b.ReportMetric(rate / *base, "x_rate")
			b.ReportMetric(cpu / *baseCPU, "x_cpu")
		}
	})
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// traceparent is a W3C traceparent header's value, of a span that was
// sampled or not: a run, its child, follows it under a parent-based
// sampler.
func traceparent(sampled bool) []byte {
	if sampled {
		return []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	}
	return []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
}

// produce writes b.N 100-byte records to topic, each with a W3C
// traceparent, as a traced producer writes them (of a sampled span or
// not).
func produce(b *testing.B, c *kafkatest.Cluster, topic string, sampled bool) {
	b.Helper()
	value := make([]byte, 100)
	tp := traceparent(sampled)
	const chunk = 10000
	for i := 0; i < b.N; i += chunk {
		var recs []*kgo.Record
		for j := i; j < min(i+chunk, b.N); j++ {
			recs = append(recs, &kgo.Record{Topic: topic, Value: value, Headers: []kgo.RecordHeader{{Key: "traceparent", Value: tp}}})
		}
		c.Produce(b, recs...)
	}
}

// dropSpans is a span processor that drops every span: the cost of
// recording, without an exporter's.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }
