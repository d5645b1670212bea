package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/benchcmp"
	"github.com/shareq/shareq/internal/cmd/shareq-bench/outboxbench"
	"github.com/shareq/shareq/migrations"
)

// Producer scenario: the cost of enqueueing, each side of a comparison
// interleaved with the other every 100 operations (benchcmp.Alternate)
// so that both see the same load, one at a time and producerPar at once:
//
//	enqueue   enqueue.Client.Enqueue of a typed job (JSON) against a raw
//	          franz-go ProduceSync of the same record
//	outbox    a transaction of a business row and pgoutbox.EnqueueTx
//	          against the same transaction without the job (needs
//	          -database); the transaction of internal/cmd/shareq-bench/outboxbench
//	relay     jobs committed through the outbox at producerRelayRate a
//	          second, one transaction each, relayed by a pgoutbox.Relay:
//	          p50, p99 and maximum from just before COMMIT to a plain
//	          consumer's receipt (needs -database)
const (
	producerPar       = 4
	producerRelayRate = 1000 // jobs/s
	// producerRelayWarm jobs go through the relay before the timed ones,
	// so that its start (its first poll, its LISTEN) is not measured.
	producerRelayWarm = 100
)

// producerSizes are the operations of each comparison and the jobs of
// the relay's latency.
func producerSizes(quick bool) (ops, relayJobs int) {
	if quick {
		return 600, 1000
	}
	return 3000, 5000
}

// runProducer runs the producer scenario on c; the outbox and relay
// parts only with a database.
func runProducer(ctx context.Context, c *cluster, log *slog.Logger, database string, quick bool,
	add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	ops, relayJobs := producerSizes(quick)
	var errs []error
	ratio := func(variant, nameA, nameB string, par int, a, b float64) {
		v := fmt.Sprintf("%s, %s", variant, benchcmp.ParName(par))
		add(v, nameA+"_per_s", a, "ops/s", fmt.Sprintf("%d operations of both sides, interleaved", ops))
		add(v, nameB+"_per_s", b, "ops/s", "")
		if a > 0 {
			add(v, "ratio", b/a, "x", nameB+" / "+nameA)
		}
	}

	progress(fmt.Sprintf("producer: Enqueue against ProduceSync, %d operations", ops))
	if err := producerEnqueue(ctx, c, ops, ratio); err != nil {
		errs = append(errs, fmt.Errorf("enqueue: %w", err))
	}
	if database == "" {
		progress("producer: outbox and relay skipped, no -database (scripts/postgres.sh url)")
		return errors.Join(errs...)
	}
	schema := "shareq_bench_" + randHex(4)
	admin, err := pgxpool.New(ctx, database)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(dctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			log.Warn("drop schema", "schema", schema, "error", err)
		}
	}()
	pool, err := newPool(ctx, database, schema, 16)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer pool.Close()
	if err := errors.Join(migrations.Up(ctx, pool), outboxbench.CreateUsersTable(ctx, pool)); err != nil {
		return errors.Join(append(errs, err)...)
	}

	progress(fmt.Sprintf("producer: EnqueueTx against the business row alone, %d transactions", ops))
	if err := producerOutbox(ctx, pool, ops, ratio); err != nil {
		errs = append(errs, fmt.Errorf("outbox: %w", err))
	}
	// The relay reads every row of the outbox; the comparison's rows,
	// whose topic does not exist, are not for it.
	if _, err := pool.Exec(ctx, "DELETE FROM "+pgoutbox.Table); err != nil {
		return errors.Join(append(errs, err)...)
	}
	progress(fmt.Sprintf("producer: relay latency, %d jobs at %d/s", relayJobs, producerRelayRate))
	lat, err := producerRelay(ctx, c, log, pool, relayJobs)
	if err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	} else {
		v := fmt.Sprintf("relay, commit to a consumer's receipt, %d jobs/s", producerRelayRate)
		q := func(p float64) float64 { return millis(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		note := fmt.Sprintf("%d jobs after %d untimed", len(lat), producerRelayWarm)
		add(v, "p50", q(0.50), "ms", note)
		add(v, "p99", q(0.99), "ms", note)
		add(v, "max", millis(lat[len(lat)-1]), "ms", note)
	}
	return errors.Join(errs...)
}

// producerEnqueue compares enqueue.Client.Enqueue with a raw ProduceSync
// of the record Enqueue would write (the JSON value and a job ID header,
// both made once), on a topic of 3 partitions.
func producerEnqueue(ctx context.Context, c *cluster, ops int, ratio func(string, string, string, int, float64, float64)) error {
	topic, err := c.topic(ctx, "enqueue", 3)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, enqueue.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	q, err := enqueue.New(cl)
	if err != nil {
		return err
	}
	v := outboxbench.Signup{User: "user@example.com", N: 1}
	proto, err := enqueue.NewJob(topic, v).Record()
	if err != nil {
		return err
	}
	raw := func() error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: proto.Value, Headers: proto.Headers}).FirstErr()
	}
	shareq := func() error {
		_, err := q.Enqueue(ctx, topic, v)
		return err
	}
	for _, par := range []int{1, producerPar} {
		a, b, err := benchcmp.Alternate(ops, par, raw, shareq)
		if err != nil {
			return err
		}
		ratio("Enqueue against ProduceSync", "produce_sync", "enqueue", par, a, b)
	}
	return nil
}

// producerOutbox compares a transaction of a business row and
// pgoutbox.EnqueueTx with the same transaction without the job.
func producerOutbox(ctx context.Context, pool *pgxpool.Pool, ops int, ratio func(string, string, string, int, float64, float64)) error {
	var n atomic.Int64
	alone := func() error { return outboxbench.SignupTx(ctx, pool, int(n.Add(1)), nil) }
	withJob := func() error {
		return outboxbench.SignupTx(ctx, pool, int(n.Add(1)), func(tx pgx.Tx, v outboxbench.Signup) error {
			_, err := pgoutbox.EnqueueTx(ctx, tx, "welcome", v) // nothing relays it: the topic need not exist
			return err
		})
	}
	for _, par := range []int{1, producerPar} {
		a, b, err := benchcmp.Alternate(ops, par, alone, withJob)
		if err != nil {
			return err
		}
		ratio("business row + EnqueueTx against the business row alone", "row_tx", "row_and_job_tx", par, a, b)
	}
	return nil
}

// relayJob is the payload of the relay's latency jobs: when its
// transaction was about to commit.
type relayJob struct {
	I           int   `json:"i"` // below producerRelayWarm: untimed
	CommitNanos int64 `json:"t"`
}

// producerRelay commits producerRelayWarm and then jobs jobs through the
// outbox at producerRelayRate a second, on a few goroutines, with a
// relay running, and returns the sorted latencies of the timed ones
// from just before COMMIT to a consumer's receipt.
func producerRelay(ctx context.Context, c *cluster, log *slog.Logger, pool *pgxpool.Pool, jobs int) ([]time.Duration, error) {
	topic, err := c.topic(ctx, "relay", 3)
	if err != nil {
		return nil, err
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...)}, enqueue.ProducerOpts()...)...)
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	relay, err := pgoutbox.NewRelay(pool, prod, pgoutbox.Logger(log))
	if err != nil {
		return nil, err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayed := make(chan error, 1)
	go func() { relayed <- relay.Run(rctx) }()
	defer func() { stopRelay(); <-relayed }()
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cons.Close()

	total := producerRelayWarm + jobs
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var perr error
	var perrOnce sync.Once
	pctx, stopProducers := context.WithCancel(ctx)
	defer func() { stopProducers(); wg.Wait() }()
	// Job i commits at start + i/rate, on one of a few goroutines (a
	// commit takes about a millisecond).
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total || pctx.Err() != nil {
					return
				}
				if err := sleepCtx(pctx, time.Until(start.Add(time.Duration(i)*time.Second/producerRelayRate))); err != nil {
					return
				}
				err := outboxbench.SignupTx(pctx, pool, i, func(tx pgx.Tx, _ outboxbench.Signup) error {
					_, err := pgoutbox.EnqueueTx(pctx, tx, topic, relayJob{I: i, CommitNanos: time.Now().UnixNano()})
					return err
				})
				if err != nil {
					perrOnce.Do(func() { perr = err; stopProducers() })
					return
				}
			}
		})
	}
	within := time.Minute + time.Duration(total)*time.Second/producerRelayRate
	cctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	lat := make([]time.Duration, 0, jobs)
	received := 0
	for received < total && cctx.Err() == nil && pctx.Err() == nil {
		fs := cons.PollFetches(cctx)
		now := time.Now()
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			var j relayJob
			if err := json.Unmarshal(r.Value, &j); err != nil {
				bad = err
				return
			}
			if received++; j.I >= producerRelayWarm {
				lat = append(lat, now.Sub(time.Unix(0, j.CommitNanos)))
			}
		})
		if bad != nil {
			return nil, bad
		}
	}
	stopProducers()
	wg.Wait()
	if perr != nil {
		return nil, perr
	}
	if received < total || len(lat) < jobs {
		return nil, fmt.Errorf("%w: %d of %d jobs received in %v", errTimeout, received, total, within)
	}
	slices.Sort(lat)
	return lat, nil
}
