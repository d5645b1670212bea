package pgoutbox

// Benchmarks of jobs for later (see bench_test.go for how to run them):
//
//   - BenchmarkScheduledDelay: b.N jobs scheduled ahead, due at about
//     1,000 a second, with SHAREQ_OUTBOX_LATER_ROWS rows (default
//     100,000) due the next day in the table; p50 and p99 from each job's
//     due time to a plain consumer's receipt of its record.
//   - BenchmarkRelayProducedLog: the relay draining batches of committed
//     jobs with the produced-ID log (ProducedRetentionDefault) and
//     without it (ProducedRetention(0)), interleaved; jobs/s of each and
//     their ratio.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/kafkatest"
)

// dueJob is the payload of BenchmarkScheduledDelay: its due time.
type dueJob struct {
	DueNanos int64 `json:"t"`
}

func BenchmarkScheduledDelay(b *testing.B) {
	const rate = 1000 // due jobs/s
	pool := benchDB(b)
	later := laterRows(b)
	if _, err := pool.Exec(b.Context(), `INSERT INTO `+Table+` (topic, key, value, job_id, due_at, next_attempt_at)
		SELECT 'elsewhere', ('k' || (i % 1000))::bytea, 'v', 'later-' || i, now() + interval '1 day', now() + interval '1 day'
		FROM generate_series(1, $1) i`, later); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(b.Context(), "ANALYZE "+Table); err != nil {
		b.Fatal(err)
	}
	c := kafkatest.New(b)
	topic := c.Topic(b, 3)
	// The jobs are scheduled before the relay starts, from 2 s ahead.
	var pgNow time.Time
	if err := pool.QueryRow(b.Context(), "SELECT clock_timestamp()").Scan(&pgNow); err != nil {
		b.Fatal(err)
	}
	first := pgNow.Add(2 * time.Second)
	for lo := 0; lo < b.N; lo += 1000 {
		err := pgx.BeginFunc(b.Context(), pool, func(tx pgx.Tx) error {
			for i := lo; i < min(lo+1000, b.N); i++ {
				due := first.Add(time.Duration(i) * time.Second / rate)
				if _, err := EnqueueJobTx(b.Context(), tx, enqueue.NewJob(topic, dueJob{DueNanos: due.UnixNano()}), At(due)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	r, err := NewRelay(pool, c.Client(b, enqueue.ProducerOpts()...))
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	run(b, r)
	cl := c.Client(b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	b.ResetTimer()
	lat := consumeLatencies(ctx, b, cl, waitTimeout+time.Duration(b.N)*time.Second/rate, func(v []byte) (int64, error) {
		var j dueJob
		err := json.Unmarshal(v, &j)
		return j.DueNanos, err
	})
	b.StopTimer()
	reportLatencies(b, lat)
	b.ReportMetric(lat[0].Seconds()*1000, "min-ms")
	b.ReportMetric(float64(later), "rows-for-later")
	b.ReportMetric(0, "ns/op")
}

func BenchmarkRelayProducedLog(b *testing.B) {
	const batch = 2000
	c := kafkatest.New(b)
	type side struct {
		name    string
		pool    *pgxpool.Pool
		topic   string
		relay   *Relay
		elapsed time.Duration
	}
	ctx := b.Context()
	var sides []*side
	for _, v := range []struct {
		name string
		opt  RelayOption
	}{{"log", ProducedRetention(ProducedRetentionDefault)}, {"nolog", ProducedRetention(0)}} {
		s := &side{name: v.name, pool: benchDB(b), topic: c.Topic(b, 3)}
		r, err := NewRelay(s.pool, c.Client(b, enqueue.ProducerOpts()...), v.opt)
		if err != nil {
			b.Fatal(err)
		}
		s.relay = r
		run(b, r)
		sides = append(sides, s)
	}
	jobs := make([]enqueue.Job, batch)
	for i := range jobs {
		jobs[i] = enqueue.NewJob("", signupArgs{User: "user@example.com", N: i})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		for _, s := range sides {
			for j := range jobs {
				jobs[j].Topic = s.topic
			}
			want := s.relay.Stats().Produced + batch
			start := time.Now()
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				_, err := EnqueueManyTx(ctx, tx, jobs...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			deadline := time.Now().Add(waitTimeout)
			for s.relay.Stats().Produced < want {
				if time.Now().After(deadline) {
					b.Fatalf("%s: the relay did not drain the batch", s.name)
				}
				time.Sleep(time.Millisecond)
			}
			s.elapsed += time.Since(start)
		}
	}
	b.StopTimer()
	n := float64((b.N + batch - 1) / batch * batch)
	for _, s := range sides {
		b.ReportMetric(n/s.elapsed.Seconds(), s.name+"-jobs/s")
	}
	b.ReportMetric(sides[1].elapsed.Seconds()/sides[0].elapsed.Seconds(), "log/nolog")
	b.ReportMetric(0, "ns/op")
}
