package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// BenchmarkNoop measures the framework's cost per job: a no-op handler
// on the worker at several Concurrency settings, against a raw franz-go share-consume loop (one
// client, default batches, accept all) in the same process. Each
// sub-benchmark consumes b.N fresh 100-byte records from 6 partitions and
// reports jobs/s and, for shareq, the ratio to the raw loop's rate.
//
//	go test -run '^$' -bench Noop -benchtime 20000x ./worker
func BenchmarkNoop(b *testing.B) {
	var rawRate float64
	b.Run("raw-franz-go", func(b *testing.B) {
		c, topic, group := benchSetup(b)
		cl := c.ShareConsumer(b, group, []string{topic})
		b.ResetTimer()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for n := 0; n < b.N; {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				b.Fatalf("consumed %d of %d", n, b.N)
			}
			fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckAccept); n++ })
		}
		if err := cl.FlushAcks(ctx); err != nil {
			b.Fatal(err)
		}
		rawRate = float64(b.N) / time.Since(start).Seconds()
		b.ReportMetric(rawRate, "jobs/s")
	})
	for _, concurrency := range []int{1, 24, 100, 1000} {
		b.Run(fmt.Sprintf("shareq/concurrency=%d", concurrency), func(b *testing.B) {
			c, topic, group := benchSetup(b)
			var done atomic.Int64
			all := make(chan struct{})
			nop := handler.Func(func(context.Context, *handler.Job) error {
				if done.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			})
			w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
				worker.Concurrency(concurrency), worker.Logger(shareqtest.Logger()))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { ran <- w.Run(ctx) }()
			select {
			case <-all:
			case <-time.After(10 * time.Minute):
				b.Errorf("done %d of %d in 10 minutes", done.Load(), b.N)
			}
			rate := float64(b.N) / time.Since(start).Seconds()
			b.StopTimer()
			cancel()
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rate, "jobs/s")
			if rawRate > 0 {
				b.ReportMetric(rate/rawRate, "x_raw")
			}
		})
	}
}

func benchSetup(b *testing.B) (*kafkatest.Cluster, string, string) {
	b.Helper()
	c := kafkatest.New(b)
	topic, group := c.Topic(b, 6), c.Group(b)
	value := make([]byte, 100)
	const chunk = 10000
	for i := 0; i < b.N; i += chunk {
		var recs []*kgo.Record
		for j := i; j < min(i+chunk, b.N); j++ {
			recs = append(recs, &kgo.Record{Topic: topic, Value: value})
		}
		c.Produce(b, recs...)
	}
	return c, topic, group
}

// requestTimes is a kgo hook that sums the round trips of the share
// session requests (ShareFetch 78, ShareAcknowledge 79): their count and
// their time from the write to the end of the response's read.
type requestTimes struct {
	fetches, acks  atomic.Int64
	fetchNs, ackNs atomic.Int64
}

func (t *requestTimes) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch key {
	case 78:
		t.fetches.Add(1)
		t.fetchNs.Add(int64(e2e.DurationE2E()))
	case 79:
		t.acks.Add(1)
		t.ackNs.Add(int64(e2e.DurationE2E()))
	}
}

// BenchmarkNoopRequests measures what limits the no-op rate: the worker
// at Concurrency 24 and 1,000 on b.N records, with the round trip of
// every share request timed (kgo's HookBrokerE2E). It reports records
// per fetch, the mean round trip of a fetch (acks piggybacked) and of a
// standalone acknowledgement, and busy: the share of the wall time a
// request of the member was in flight (one at a time per session, one
// broker: near 1 means the broker's answers, not the member's own work,
// set the rate).
//
//	go test -run '^$' -bench NoopRequests -benchtime 200000x ./worker
func BenchmarkNoopRequests(b *testing.B) {
	for _, concurrency := range []int{24, 1000} {
		b.Run(fmt.Sprintf("concurrency=%d", concurrency), func(b *testing.B) {
			c, topic, group := benchSetup(b)
			var done atomic.Int64
			all := make(chan struct{})
			nop := handler.Func(func(context.Context, *handler.Job) error {
				if done.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			})
			times := &requestTimes{}
			w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
				worker.Concurrency(concurrency), worker.Logger(shareqtest.Logger()),
				worker.ClientOpts(kgo.WithHooks(times)))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { ran <- w.Run(ctx) }()
			select {
			case <-all:
			case <-time.After(10 * time.Minute):
				b.Errorf("done %d of %d in 10 minutes", done.Load(), b.N)
			}
			took := time.Since(start)
			b.StopTimer()
			fetches, acks := times.fetches.Load(), times.acks.Load()
			fetchNs, ackNs := times.fetchNs.Load(), times.ackNs.Load()
			cancel()
			if err := <-ran; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/took.Seconds(), "jobs/s")
			b.ReportMetric(float64(b.N)/float64(max(fetches, 1)), "records/fetch")
			b.ReportMetric(float64(fetchNs)/float64(max(fetches, 1))/1e6, "fetch-ms")
			b.ReportMetric(float64(ackNs)/float64(max(acks, 1))/1e6, "ack-ms")
			b.ReportMetric(float64(acks), "acks")
			b.ReportMetric(float64(fetchNs+ackNs)/float64(took), "busy")
		})
	}
}
