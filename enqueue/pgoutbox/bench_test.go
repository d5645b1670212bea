package pgoutbox

// Benchmarks of the producer side, on the test Postgres and the test
// broker (kfake, or Kafka with SHAREQ_TEST_BROKERS):
//
//	SHAREQ_TEST_DATABASE_URL=$(scripts/postgres.sh url) \
//	  go test -run '^$' -bench . -benchtime 3000x ./enqueue/pgoutbox/
//
// Each comparison interleaves its two sides in chunks of
// interleaveChunk operations, so both see the same load of a shared
// machine, and reports both rates and their ratio:
//
//   - BenchmarkTransactionalEnqueue: a business row and a job in one
//     transaction, shareq's EnqueueTx against River's InsertTx (an
//     insert-only River client, same Postgres, same pool), one
//     transaction at a time and benchParallelism at once; shareq/river.
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
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/pgtest"
	"github.com/shareq/shareq/migrations"
)

// benchParallelism is how many transactions (or produces) run at once in
// the parallel variants.
const benchParallelism = 4

// signupArgs is the River job of the comparison: the same payload as
// shareq's.
type signupArgs struct {
	User string `json:"user"`
	N    int    `json:"n"`
}

func (signupArgs) Kind() string { return "shareq_bench_welcome" }

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

// signupTx is one transaction of the benchmark: the business row, then
// the job through enqueueJob.
func signupTx(ctx context.Context, pool *pgxpool.Pool, n int, enqueueJob func(tx pgx.Tx, v signupArgs) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO bench_users (email) VALUES ($1)", "user@example.com"); err != nil {
			return err
		}
		return enqueueJob(tx, signupArgs{User: "user@example.com", N: n})
	})
}

func BenchmarkTransactionalEnqueue(b *testing.B) {
	pool := benchDB(b)
	topic := "welcome" // no relay runs: the topic need not exist

	riverSchema := pgtest.Schema(b)
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: riverSchema})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(b.Context(), rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	rc, err := river.NewClient(driver, &river.Config{Schema: riverSchema}) // insert-only
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var n, shareqN, riverN atomic.Int64
	shareq := func() error {
		shareqN.Add(1)
		return signupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v signupArgs) error {
			_, err := EnqueueTx(ctx, tx, topic, v)
			return err
		})
	}
	riv := func() error {
		riverN.Add(1)
		return signupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v signupArgs) error {
			_, err := rc.InsertTx(ctx, tx, v, nil)
			return err
		})
	}
	for _, par := range []int{1, benchParallelism} {
		b.Run(parName(par), func(b *testing.B) { interleave(b, par, "river", riv, "shareq", shareq) })
	}
	// Both sides committed what they were timed for.
	var outbox, jobs, users int64
	err = pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+Table+"), (SELECT count(*) FROM "+
		pgx.Identifier{riverSchema, "river_job"}.Sanitize()+"), (SELECT count(*) FROM bench_users)").Scan(&outbox, &jobs, &users)
	if err != nil {
		b.Fatal(err)
	}
	if outbox != shareqN.Load() || jobs != riverN.Load() || users != outbox+jobs {
		b.Fatalf("outbox rows %d, River jobs %d, users %d; want %d, %d and their sum", outbox, jobs, users, shareqN.Load(), riverN.Load())
	}
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
	r, err := NewRelay(pool, c.Client(b))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			b.Error(err)
		}
	})
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
	lat := make([]time.Duration, 0, b.N)
	pctx, pcancel := context.WithTimeout(ctx, waitTimeout+time.Duration(b.N)*time.Second/rate)
	defer pcancel()
	for len(lat) < b.N && pctx.Err() == nil {
		fs := cl.PollFetches(pctx)
		now := time.Now()
		fs.EachRecord(func(rec *kgo.Record) {
			var j latencyJob
			if err := json.Unmarshal(rec.Value, &j); err != nil {
				b.Error(err)
				return
			}
			lat = append(lat, now.Sub(time.Unix(0, j.CommitNanos)))
		})
	}
	elapsed := time.Since(start)
	producers.Wait()
	b.StopTimer()
	if len(lat) < b.N {
		b.Fatalf("consumed %d of %d jobs", len(lat), b.N)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Seconds() * 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkEnqueue(b *testing.B) {
	c := kafkatest.New(b)
	topic := c.Topic(b, 3)
	cl := c.Client(b)
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
		b.Run(parName(par), func(b *testing.B) { interleave(b, par, "raw", raw, "shareq", shareq) })
	}
}

// parName names a variant by how many operations run at once.
func parName(par int) string {
	if par == 1 {
		return "serial"
	}
	return fmt.Sprintf("%d-at-once", par)
}

// interleaveChunk is how many operations of one side run before the
// other side's turn.
const interleaveChunk = 100

// interleave runs b.N operations, alternating between opA and opB every
// interleaveChunk operations, par at a time, so that both sides see the
// same load on a shared machine. It reports each side's operations per
// second and the ratio B/A.
func interleave(b *testing.B, par int, nameA string, opA func() error, nameB string, opB func() error) {
	var took [2]time.Duration
	var done [2]int
	ops := [2]func() error{opA, opB}
	b.ResetTimer()
	for k := 0; done[0]+done[1] < b.N; k++ {
		side := k % 2
		n := min(interleaveChunk, b.N-done[0]-done[1])
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range par {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if err := ops[side](); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		took[side] += time.Since(t0)
		done[side] += n
		if b.Failed() {
			b.FailNow()
		}
	}
	b.StopTimer()
	rate := func(i int) float64 {
		if took[i] == 0 {
			return 0
		}
		return float64(done[i]) / took[i].Seconds()
	}
	b.ReportMetric(rate(0), nameA+"-jobs/s")
	b.ReportMetric(rate(1), nameB+"-jobs/s")
	if rate(0) > 0 {
		b.ReportMetric(rate(1)/rate(0), nameB+"/"+nameA)
	}
	b.ReportMetric(0, "ns/op")
}
