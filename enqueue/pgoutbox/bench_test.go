package pgoutbox

// Benchmarks of the producer side, on the test Postgres and the test
// broker (kfake, or Kafka with SHAREQ_TEST_BROKERS):
//
//	SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url) \
//	  go test -run '^$' -bench . -benchtime 3000x ./enqueue/pgoutbox/
//
// Each comparison interleaves its two sides in chunks of
// interleaveChunk operations, so both see the same load of a shared
// machine, and reports both rates and their ratio (the comparison with
// River's InsertTx is in internal/cmd/shareq-bench/outboxbench, so that
// River is no dependency of this module):
//
//   - BenchmarkEnqueue: enqueue.Client.Enqueue against a raw franz-go
//     ProduceSync of the same record, one at a time and
//     benchParallelism at once; shareq/raw.
//   - BenchmarkRelayLatency: b.N jobs committed at about 1,000 a second,
//     one transaction each; p50 and p99 from just before COMMIT to a
//     plain consumer's receipt of the record (so the commit and the
//     consumer's fetch are in it).

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/benchcmp"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// benchParallelism is how many transactions (or produces) run at once in
// the parallel variants.
const benchParallelism = 4

// signupArgs is the job of the benchmarks.
type signupArgs struct {
	User string `json:"user"`
	N    int    `json:"n"`
}

// benchDB returns a pool on a migrated schema with a business table,
// bench_users.
func benchDB(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool, _ := pgtest.NewPool(b, 32)
	if err := migrations.Up(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(b.Context(), "CREATE TABLE bench_users (id bigserial PRIMARY KEY, email text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	return pool
}

// latencyJob is the payload of the latency benchmark: when its
// transaction was about to commit.
type latencyJob struct {
	CommitNanos int64 `json:"t"`
}

func BenchmarkRelayLatency(b *testing.B) {
	const rate = 1000 // jobs/s
	pool := benchDB(b)
	c := kafkatest.New(b)
	topic := c.Topic(b, 3)
	r, err := NewRelay(pool, c.Client(b, enqueue.ProducerOpts()...))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	run(b, r)
	// Wait until the relay listens, so that the first jobs are not
	// relayed by its first poll.
	deadline := time.Now().Add(waitTimeout)
	for !r.listening.Load() {
		if time.Now().After(deadline) {
			b.Fatal("the relay did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cl := c.Client(b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))

	b.ResetTimer()
	start := time.Now()
	// Job i commits at start + i/rate, on one of a few producing
	// goroutines (a commit takes about a millisecond).
	var next atomic.Int64
	var producers sync.WaitGroup
	for range 4 {
		producers.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / rate)))
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "INSERT INTO bench_users (email) VALUES ($1)", "user@example.com"); err != nil {
						return err
					}
					_, err := EnqueueTx(ctx, tx, topic, latencyJob{CommitNanos: time.Now().UnixNano()})
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	lat := consumeLatencies(ctx, b, cl, waitTimeout+time.Duration(b.N)*time.Second/rate, func(v []byte) (int64, error) {
		var j latencyJob
		err := json.Unmarshal(v, &j)
		return j.CommitNanos, err
	})
	elapsed := time.Since(start)
	producers.Wait()
	b.StopTimer()
	reportLatencies(b, lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkEnqueue(b *testing.B) {
	c := kafkatest.New(b)
	topic := c.Topic(b, 3)
	cl := c.Client(b, enqueue.ProducerOpts()...)
	q, err := enqueue.New(cl)
	if err != nil {
		b.Fatal(err)
	}
	v := signupArgs{User: "user@example.com", N: 1}
	// The raw loop produces the record Enqueue would: the JSON value and
	// a job ID header, both made once.
	proto, err := enqueue.NewJob(topic, v).Record()
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	raw := func() error {
		rec := &kgo.Record{Topic: topic, Value: proto.Value, Headers: proto.Headers}
		return cl.ProduceSync(ctx, rec).FirstErr()
	}
	shareq := func() error {
		_, err := q.Enqueue(ctx, topic, v)
		return err
	}
	for _, par := range []int{1, benchParallelism} {
		b.Run(benchcmp.ParName(par), func(b *testing.B) { benchcmp.Interleave(b, par, "raw", raw, "shareq", shareq) })
	}
}

// consumeLatencies polls cl until b.N jobs arrived, for at most within,
// and returns each job's time from the moment its value names (the Unix
// nanoseconds at returns) to its receipt.
func consumeLatencies(ctx context.Context, b *testing.B, cl *kgo.Client, within time.Duration, at func(value []byte) (int64, error)) []time.Duration {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	pctx, pcancel := context.WithTimeout(ctx, within)
	defer pcancel()
	for len(lat) < b.N && pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		now := time.Now()
		fs.EachRecord(func(rec *kgo.Record) {
			nanos, err := at(rec.Value)
			if err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, now.Sub(time.Unix(0, nanos)))
		})
	}
	return lat
}

// reportLatencies reports the p50, p99 and maximum of lat in
// milliseconds; fewer than b.N latencies fail the benchmark.
func reportLatencies(b *testing.B, lat []time.Duration) {
	b.Helper()
	if len(lat) < b.N {
		b.Fatalf("consumed %d of %d jobs", len(lat), b.N)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() * 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
}
