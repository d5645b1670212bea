package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// The measurements of BENCHMARKS.md's priorities section, skipped unless
// SHAREQ_PRIORITY_BENCH=1 (they take minutes and need a quiet machine):
//
//	SHAREQ_PRIORITY_BENCH=1 SHAREQ_TEST_BROKERS=127.0.0.1:19092 \
//	    go test -count=1 -v -timeout 20m -run 'TestMeasurePriorit' ./worker
//
// SHAREQ_PRIORITY_BENCH_FOR sets the weighted run's measured period
// (default 60s).

// Settings of the measurements.
const (
	measureConcurrency = 16
	measureJob         = 200 * time.Millisecond // a bulk (or weighted) job's duration
	measureBulk        = 10_000
	measureUrgent      = 100
	measurePartitions  = 6
)

func measureOn(t *testing.T) {
	t.Helper()
	if os.Getenv("SHAREQ_PRIORITY_BENCH") != "1" {
		t.Skip("a measurement: set SHAREQ_PRIORITY_BENCH=1 to run it")
	}
}

// sleepFor is a handler that takes d (or until its context ends).
func sleepFor(d time.Duration) handler.Func {
	return func(ctx context.Context, _ *handler.Job) error {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	}
}

// TestMeasurePriorityUrgentWait: 10,000 bulk jobs of 200 ms wait, one
// worker at Concurrency 16 runs them; once it runs at speed, 100 urgent
// jobs are produced at once. Reports the urgent jobs' wait from produce to
// start, with StrictPriority, without priorities (FIFO in hand), and with
// the urgent topic on a Worker of its own (Concurrency 4) beside the bulk
// one in the same process.
func TestMeasurePriorityUrgentWait(t *testing.T) {
	measureOn(t)
	for _, tc := range []struct {
		name   string
		strict bool
		own    bool
	}{{"strict", true, false}, {"none", false, false}, {"own worker", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.New(t)
			bulk, urgent, group := c.Topic(t, measurePartitions), c.Topic(t, measurePartitions), c.Group(t)
			keys := jobKeys("bulk", measureBulk)
			for i := 0; i < len(keys); i += 1000 {
				c.Produce(t, recordsOf(bulk, keys[i:min(i+1000, len(keys))])...)
			}
			var mu sync.Mutex
			var waits []time.Duration
			var bulkStarts atomic.Int64
			urgentH := handler.Func(func(_ context.Context, job *handler.Job) error {
				mu.Lock()
				waits = append(waits, time.Since(job.Timestamp))
				mu.Unlock()
				return nil
			})
			bulkH := handler.Func(func(ctx context.Context, job *handler.Job) error {
				bulkStarts.Add(1)
				return sleepFor(measureJob)(ctx, job)
			})
			opts := []worker.Option{
				worker.Brokers(c.Seeds...), worker.Group(group), worker.Concurrency(measureConcurrency),
				worker.Handle(bulk, bulkH), worker.ShutdownTimeout(time.Second),
			}
			switch {
			case tc.strict:
				opts = append(opts, worker.Handle(urgent, urgentH), worker.StrictPriority(urgent, bulk))
			case tc.own:
				w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Concurrency(4),
					worker.Handle(urgent, urgentH), worker.ShutdownTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				stopUrgent := kafkatest.Run(t, w.Run)
				defer func() { _ = stopUrgent() }()
			default:
				opts = append(opts, worker.Handle(urgent, urgentH))
			}
			w, err := worker.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			stop := kafkatest.Run(t, w.Run)
			waitUntil(t, 60*time.Second, "the worker at speed (400 bulk starts)", func() bool { return bulkStarts.Load() >= 400 })
			before := bulkStarts.Load()
			c.Produce(t, recordsOf(urgent, jobKeys("urgent", measureUrgent))...)
			waitUntil(t, 120*time.Second, "every urgent job started", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(waits) == measureUrgent
			})
			during := bulkStarts.Load() - before
			_ = stop()
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(waits)
			t.Logf("%s %s, priorities %s: urgent wait produce→start p50 %v, p99 %v, max %v; bulk jobs started meanwhile %d",
				c.Kind, c.Version, tc.name, ms(waits[len(waits)/2]), ms(waits[len(waits)*99/100-1]), ms(waits[len(waits)-1]), during)
		})
	}
}

// TestMeasurePriorityWeights: a backlog of two topics, weights 3:1, one
// worker at Concurrency 16 with jobs of 200 ms; the topics' shares of the
// starts over the measured period (after a 5 s warm-up).
func TestMeasurePriorityWeights(t *testing.T) {
	measureOn(t)
	period := 60 * time.Second
	if s := os.Getenv("SHAREQ_PRIORITY_BENCH_FOR"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SHAREQ_PRIORITY_BENCH_FOR: %v", err)
		}
		period = d
	}
	c := kafkatest.New(t)
	heavy, light, group := c.Topic(t, measurePartitions), c.Topic(t, measurePartitions), c.Group(t)
	// Enough of each for the run at the whole rate.
	n := int(float64(measureConcurrency)*(period+10*time.Second).Seconds()/measureJob.Seconds()) + 1000
	for _, topic := range []string{heavy, light} {
		keys := jobKeys(topic, n)
		for i := 0; i < len(keys); i += 1000 {
			c.Produce(t, recordsOf(topic, keys[i:min(i+1000, len(keys))])...)
		}
	}
	var counting atomic.Bool
	var heavyN, lightN atomic.Int64
	count := func(n *atomic.Int64) handler.Func {
		return func(ctx context.Context, job *handler.Job) error {
			if counting.Load() {
				n.Add(1)
			}
			return sleepFor(measureJob)(ctx, job)
		}
	}
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.Concurrency(measureConcurrency),
		worker.Handle(heavy, count(&heavyN)), worker.Handle(light, count(&lightN)), worker.Priority(heavy, 3),
		worker.ShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	time.Sleep(5 * time.Second) // a measurement's warm-up, not a wait for a condition
	counting.Store(true)
	time.Sleep(period)
	counting.Store(false)
	_ = stop()
	h, l := heavyN.Load(), lightN.Load()
	t.Logf("%s %s, weights 3:1 over %v: %d : %d starts, heavy share %.3f (3:1 is 0.750), ratio %.2f",
		c.Kind, c.Version, period, h, l, float64(h)/float64(h+l), float64(h)/float64(max(l, 1)))
}

// waitUntil polls cond every 10 ms until it holds, failing t after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
