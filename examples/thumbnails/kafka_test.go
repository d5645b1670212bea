package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/devbroker"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// Processes that start at once on a fresh broker (docker compose's worker
// and producer) all create the example's topics: each ensureTopic
// succeeds, whoever created the topic, and when it returns a worker's
// start-up check finds the topic. -work-only used to exit with "topic
// does not exist" here.
func TestEnsureTopicConcurrently(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	name := kafkatest.Name(t, "thumbs")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteTopics(ctx, name)
	})
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	const procs = 4
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds...))
			if err != nil {
				errs[i] = err
				return
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out logbuf.Buffer
			if errs[i] = ensureTopic(ctx, kadm.NewClient(cl), newConsole(&out, false), false, name, 3); errs[i] != nil {
				return
			}
			w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(kafkatest.Name(t, "g")), worker.Handle(name, nop),
				worker.Logger(slog.New(slog.DiscardHandler)))
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = w.Check(ctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v", i, err)
		}
	}
	md, err := c.Admin().ListTopics(context.Background(), name)
	if err != nil || len(md[name].Partitions) != 3 {
		t.Fatalf("topic %s: %v partitions, %v", name, len(md[name].Partitions), err)
	}
}

// -work-only and -produce-only started together on a fresh broker, as
// docker compose starts them: both create the topics, neither fails, and
// the worker finishes every job.
func TestRunWorkAndProduceStartTogether(t *testing.T) {
	t.Parallel()
	c, err := devbroker.Start(0, partitions) // no topics yet
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	work := testConfig(t, 20)
	work.Brokers, work.WorkOnly = c.ListenAddrs(), true
	produce := testConfig(t, 20)
	produce.Brokers, produce.ProduceOnly = c.ListenAddrs(), true
	var s, p Summary
	var errW, errP error
	var wg sync.WaitGroup
	wg.Go(func() { s, errW = runSummary(t, work) })
	wg.Go(func() { p, errP = runSummary(t, produce) })
	wg.Wait()
	if errW != nil || errP != nil {
		t.Fatalf("work-only: %v\nproduce-only: %v", errW, errP)
	}
	if p.Produced != 20 {
		t.Fatalf("produce-only produced %d", p.Produced)
	}
	checkSummary(t, s, 20)
}

// runSummary is runJSON for a goroutine of the test's own: it returns what
// runJSON would fail the test with.
func runSummary(t *testing.T, cfg config) (Summary, error) {
	cfg.JSON = true
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, cfg, &stdout, &stderr); err != nil {
		return Summary{}, fmt.Errorf("run: %w\nstderr:\n%s", err, stderr.String())
	}
	var s Summary
	if err := json.Unmarshal([]byte(stdout.String()), &s); err != nil {
		return Summary{}, fmt.Errorf("summary is not JSON: %w\n%s", err, stdout.String())
	}
	return s, nil
}
