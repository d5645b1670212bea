package pgjoblog

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// BenchmarkJobFinished measures what the job log costs the worker's
// goroutines per job: JobStarted and JobFinished, appending to the
// buffer (no writer: the buffer wraps, as when Postgres is down).
//
//	go test -run '^$' -bench JobFinished -benchmem ./joblog/pgjoblog
func BenchmarkJobFinished(b *testing.B) {
	l, err := New(&pgxpool.Pool{})
	if err != nil {
		b.Fatal(err)
	}
	res := worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Err: errors.New("boom"), Ran: true, Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		j := job("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 1, 1)
		for pb.Next() {
			l.JobStarted(j)
			l.JobFinished(j, res)
		}
	})
}

// BenchmarkNoopWorker measures a no-op worker's jobs/s without and with
// the job log writing to SHAREQ_TEST_DATABASE_URL, in one process, and
// reports the ratio.
//
//	SHAREQ_TEST_DATABASE_URL=... go test -run '^$' -bench NoopWorker -benchtime 20000x ./joblog/pgjoblog
func BenchmarkNoopWorker(b *testing.B) {
	var without float64
	for _, withLog := range []bool{false, true} {
		name := "without-log"
		if withLog {
			name = "with-log"
		}
		b.Run(name, func(b *testing.B) {
			var obs []worker.Observer
			if withLog {
				l, err := New(migrated(b))
				if err != nil {
					b.Fatal(err)
				}
				start(b, l)
				obs = append(obs, l)
			}
			rate := noopRate(b, obs)
			b.ReportMetric(rate, "jobs/s")
			if withLog && without > 0 {
				b.ReportMetric(rate/without, "x_without")
			} else {
				without = rate
			}
		})
	}
}

// noopRate runs b.N no-op jobs on a worker with observers obs and
// returns its jobs/s.
func noopRate(b *testing.B, obs []worker.Observer) float64 {
	c := kafkatest.New(b)
	topic, group := c.Topic(b, 6), c.Group(b)
	value := make([]byte, 100)
	for i := 0; i < b.N; i += 10000 {
		var recs []*kgo.Record
		for range min(10000, b.N-i) {
			recs = append(recs, &kgo.Record{Topic: topic, Value: value})
		}
		c.Produce(b, recs...)
	}
	var done atomic.Int64
	all := make(chan struct{})
	nop := handler.Func(func(context.Context, *handler.Job) error {
		if done.Add(1) == int64(b.N) {
			close(all)
		}
		return nil
	})
	opts := []worker.Option{worker.Brokers(c.Seeds...), worker.Group(group), worker.Handle(topic, nop),
		worker.Concurrency(100), worker.Logger(shareqtest.Logger())}
	if len(obs) > 0 {
		opts = append(opts, worker.Observers(obs...))
	}
	w, err := worker.New(opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	began := time.Now()
	stop := kafkatest.Run(b, w.Run)
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("done %d of %d in 10 minutes", done.Load(), b.N)
	}
	rate := float64(b.N) / time.Since(began).Seconds()
	b.StopTimer()
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	return rate
}
