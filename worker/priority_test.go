package worker_test

import (
	"context"
	"slices"
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

// topicStarts records the topics of the jobs started, in start order.
type topicStarts struct {
	mu     sync.Mutex
	topics []string
}

// handler records each start, then takes d.
func (s *topicStarts) handler(d time.Duration) handler.Func {
	return func(ctx context.Context, job *handler.Job) error {
		s.mu.Lock()
		s.topics = append(s.topics, job.Topic)
		s.mu.Unlock()
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	}
}

// count returns how many jobs of topic started.
func (s *topicStarts) count(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.topics {
		if t == topic {
			n++
		}
	}
	return n
}

// snapshot returns the topics started so far, in start order.
func (s *topicStarts) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.topics)
}

// With StrictPriority, the member asks only for the urgent topic while it
// has records: a burst of urgent jobs produced under a bulk backlog runs
// with no more bulk jobs started meanwhile than the worker held when it
// came (Concurrency plus a prefetch of a few), on kfake and Kafka. Ordered
// only in hand, the broker's even mix of the two topics would start about
// as many bulk jobs as urgent ones.
func TestStrictPriorityFetchesNoLowerTopicWhileAnUrgentOneHasRecords(t *testing.T) {
	t.Parallel()
	const conc, nUrgent, maxBulk = 4, 100, 12
	b := setup(t, 3)
	urgent := b.c.Topic(t, 3)
	b.produce(t, jobKeys("bulk", 3000)...)
	var log topicStarts
	b.start(t, log.handler(20*time.Millisecond), worker.Concurrency(conc),
		worker.Handle(urgent, log.handler(0)), worker.StrictPriority(urgent, b.topic))
	waitUntil(t, 60*time.Second, "40 bulk jobs started", func() bool { return log.count(b.topic) >= 40 })
	b.c.Produce(t, recordsOf(urgent, jobKeys("urgent", nUrgent))...)
	waitUntil(t, 60*time.Second, "every urgent job started", func() bool { return log.count(urgent) == nUrgent })
	starts := log.snapshot()
	first, last := slices.Index(starts, urgent), 0
	for i, topic := range starts {
		if topic == urgent {
			last = i
		}
	}
	bulkDuring := last - first + 1 - nUrgent
	t.Logf("bulk jobs started between the first and the last urgent start: %d", bulkDuring)
	if bulkDuring > maxBulk {
		t.Errorf("%d bulk jobs started between the first and the last of %d urgent ones, want at most %d: the fetches asked for the bulk topic while the urgent one had records",
			bulkDuring, nUrgent, maxBulk)
	}
}

// With Priority(heavy, 3), the member's fetches follow the weights: under
// a backlog of both topics, 3 of every 4 jobs started are heavy ones, on
// kfake and Kafka. Ordered only in hand, the broker's even mix of the two
// topics would start about as many of each.
func TestPriorityWeightsShareTheFetches(t *testing.T) {
	t.Parallel()
	const conc, backlog, warm, counted = 4, 900, 40, 600
	b := setup(t, 3)
	light := b.c.Topic(t, 3)
	b.produce(t, jobKeys("heavy", backlog)...)
	b.c.Produce(t, recordsOf(light, jobKeys("light", backlog))...)
	var log topicStarts
	b.start(t, log.handler(2*time.Millisecond), worker.Concurrency(conc),
		worker.Handle(light, log.handler(2*time.Millisecond)), worker.Priority(b.topic, 3))
	waitUntil(t, 60*time.Second, "the counted jobs started", func() bool { return len(log.snapshot()) >= warm+counted })
	heavy := 0
	for _, topic := range log.snapshot()[warm : warm+counted] {
		if topic == b.topic {
			heavy++
		}
	}
	share := float64(heavy) / counted
	t.Logf("heavy share of %d starts: %.3f (3:1 is 0.750)", counted, share)
	if share < 0.70 || share > 0.80 {
		t.Errorf("heavy jobs were %.3f of %d starts under a backlog of both, want 0.75 ± 0.05 (weights 3:1)", share, counted)
	}
}
