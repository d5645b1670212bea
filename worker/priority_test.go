package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

func TestNewRejectsBadPriorities(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	valid := []worker.Option{worker.Brokers("127.0.0.1:9092"), worker.Group("g"), worker.Handle("emails", nop), worker.Handle("reports", nop)}
	for _, tc := range []struct {
		name string
		opts []worker.Option
		want string
	}{
		{"weight of no handler", []worker.Option{worker.Priority("other", 2)}, `Priority("other", 2): no handler for the topic; register it with worker.Handle first`},
		{"weight twice", []worker.Option{worker.Priority("emails", 2), worker.Priority("emails", 3)}, `Priority("emails", 3): the topic's weight is set twice`},
		{"weight zero", []worker.Option{worker.Priority("emails", 0)}, `Priority("emails", 0): the weight must be from 1 to 1000`},
		{"weight too large", []worker.Option{worker.Priority("emails", 1001)}, `Priority("emails", 1001): the weight must be from 1 to 1000 (topics without a Priority weigh 1; for strict order use worker.StrictPriority)`},
		{"strict of no handler", []worker.Option{worker.StrictPriority("emails", "other")}, `StrictPriority("other"): no handler for the topic`},
		{"strict twice", []worker.Option{worker.StrictPriority("emails"), worker.StrictPriority("reports")}, "StrictPriority given 2 times: name every topic, in order, in one StrictPriority"},
		{"strict empty", []worker.Option{worker.StrictPriority()}, "StrictPriority(): no topics; name the topics in order, the most urgent first"},
		{"strict names a topic twice", []worker.Option{worker.StrictPriority("emails", "reports", "emails")}, `StrictPriority("emails"): the topic is named twice`},
		{"both", []worker.Option{worker.StrictPriority("emails"), worker.Priority("reports", 2)}, "StrictPriority and Priority on one worker: choose strict order (StrictPriority) or weights (Priority), not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, err := worker.New(append(append([]worker.Option{}, valid...), tc.opts...)...)
			if err == nil {
				t.Fatalf("New accepted %s", tc.name)
			}
			if w != nil {
				t.Fatal("New returned a worker with an error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "worker: ") {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
	for _, opts := range [][]worker.Option{
		{worker.Priority("emails", 3)},
		{worker.Priority("emails", 1000), worker.Priority("reports", 1)},
		{worker.StrictPriority("emails")},
		{worker.StrictPriority("reports", "emails")},
	} {
		if _, err := worker.New(append(append([]worker.Option{}, valid...), opts...)...); err != nil {
			t.Errorf("valid priorities: %v", err)
		}
	}
}

// A worker with priorities over two topics, a backlog of both produced
// before it starts, runs every job of both exactly once, on kfake and
// Kafka: the topics' lanes lose and repeat nothing.
func TestPrioritiesRunEveryJobOfEveryTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  func(urgent, bulk string) worker.Option
	}{
		{"strict", func(urgent, bulk string) worker.Option { return worker.StrictPriority(urgent, bulk) }},
		{"weights", func(urgent, _ string) worker.Option { return worker.Priority(urgent, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 3)
			urgent := b.c.Topic(t, 2)
			b.produce(t, jobKeys("bulk", 150)...)
			b.c.Produce(t, recordsOf(urgent, jobKeys("urgent", 50))...)
			var mu sync.Mutex
			runs := map[string]int{}
			h := handler.Func(func(ctx context.Context, job *handler.Job) error {
				mu.Lock()
				runs[job.Topic+"/"+string(job.Key)]++
				mu.Unlock()
				select {
				case <-time.After(time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			})
			b.start(t, h, worker.Concurrency(4), worker.Handle(urgent, h), tc.opt(urgent, b.topic))
			b.obs.WaitFor(t, 60*time.Second, "every job of both topics done", func(fs []finished) bool {
				return countPrefix(fs, "bulk", worker.OutcomeSucceeded) == 150 && countPrefix(fs, "urgent", worker.OutcomeSucceeded) == 50
			})
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != 200 {
				t.Errorf("%d jobs ran, want 200", len(runs))
			}
			for k, n := range runs {
				if n != 1 {
					t.Errorf("%s ran %d times, want once", k, n)
				}
			}
		})
	}
}

// recordsOf returns records of topic with the given keys (values are the
// keys too).
func recordsOf(topic string, keys []string) []*kgo.Record {
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(k)}
	}
	return recs
}
