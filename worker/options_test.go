package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	valid := []worker.Option{worker.Brokers("127.0.0.1:9092"), worker.Group("g"), worker.Handle("jobs", nop)}
	for _, tc := range []struct {
		name string
		opts []worker.Option
		want string
	}{
		{"no brokers", []worker.Option{worker.Group("g"), worker.Handle("jobs", nop)}, "Brokers"},
		{"empty broker", []worker.Option{worker.Brokers("")}, "Brokers: empty"},
		{"no group", []worker.Option{worker.Group("")}, "Group"},
		{"no handlers", []worker.Option{worker.Brokers("b:1"), worker.Group("g")}, "Handle: no handlers"},
		{"nil handler", []worker.Option{worker.Handle("other", nil)}, `Handle("other"): handler is nil`},
		{"topic twice", []worker.Option{worker.Handle("jobs", nop)}, `Handle("jobs"): topic registered twice`},
		{"empty topic", []worker.Option{worker.Handle("", nop)}, "Handle: empty topic"},
		{"empty required topic", []worker.Option{worker.RequireTopics("orders.dlq", " ")}, "RequireTopics: empty topic name"},
		{"nil middleware", []worker.Option{worker.Use(nil)}, "Use: middleware 0 is nil"},
		{"zero concurrency", []worker.Option{worker.Concurrency(0)}, "Concurrency(0)"},
		{"negative shutdown", []worker.Option{worker.ShutdownTimeout(-time.Second)}, "ShutdownTimeout(-1s)"},
		{"zero start timeout", []worker.Option{worker.StartTimeout(0)}, "StartTimeout(0s)"},
		{"offset reset", []worker.Option{worker.AutoOffsetReset("oldest")}, `AutoOffsetReset("oldest")`},
		{"negative margin", []worker.Option{worker.RenewMargin(-time.Second)}, "RenewMargin(-1s)"},
		{"zero max hold", []worker.Option{worker.MaxHold(0)}, "MaxHold(0s)"},
		{"negative spares", []worker.Option{worker.SpareDeliveries(-1)}, "SpareDeliveries(-1)"},
		{"limit 1", []worker.Option{worker.DeliveryLimit(1)}, "DeliveryLimit(1): must be at least 2"},
		{"negative limit", []worker.Option{worker.DeliveryLimit(-2)}, "DeliveryLimit(-2): must be at least 2"},
		{"spares take every delivery", []worker.Option{worker.DeliveryLimit(5), worker.SpareDeliveries(5)}, "SpareDeliveries(5) leaves none of DeliveryLimit(5) to run: set it at most 4"},
		{"limit above Kafka's", []worker.Option{worker.DeliveryLimit(26)}, "DeliveryLimit(26): must be at most 25"},
		{"group with colon", []worker.Option{worker.Group("team:jobs")}, `Group("team:jobs"): must not contain ':'`},
		{"topic with space", []worker.Option{worker.Handle("my jobs", nop)}, `Handle("my jobs"): topic name contains ' '`},
		{"topic with slash", []worker.Option{worker.Handle("a/b", nop)}, `Handle("a/b"): topic name contains '/'`},
		{"topic dot", []worker.Option{worker.Handle(".", nop)}, `Handle("."): Kafka refuses "." and ".."`},
		{"topic dot dot", []worker.Option{worker.Handle("..", nop)}, `Handle(".."): Kafka refuses`},
		{"topic too long", []worker.Option{worker.Handle(strings.Repeat("t", 250), nop)}, "topic name is 250 characters long; Kafka allows at most 249"},
		{"required topic bad", []worker.Option{worker.RequireTopics("jobs.dlq", "jobs:dlq")}, `RequireTopics("jobs:dlq"): topic name contains ':'`},
		{"broker dlq bad", []worker.Option{worker.BrokerDLQ("dlq.é")}, `BrokerDLQ("dlq.é"): topic name contains 'é'`},
		{"session timeout negative", []worker.Option{worker.SessionTimeout(-time.Second)}, "SessionTimeout(-1s): must be from 1s to 1h"},
		{"session timeout short", []worker.Option{worker.SessionTimeout(999 * time.Millisecond)}, "SessionTimeout(999ms): must be from 1s to 1h"},
		{"session timeout long", []worker.Option{worker.SessionTimeout(61 * time.Minute)}, "SessionTimeout(1h1m0s): must be from 1s to 1h"},
		{"session timeout sub-ms", []worker.Option{worker.SessionTimeout(2*time.Second + time.Microsecond)}, "SessionTimeout(2.000001s): must be whole milliseconds"},
		{"fetch wait", []worker.Option{worker.FetchMaxWait(5 * time.Millisecond)}, "FetchMaxWait(5ms)"},
		{"nil observer", []worker.Option{worker.Observers(nil)}, "Observers: observer is nil"},
		{"batch above concurrency", []worker.Option{worker.Handle("bulk", handler.Batch(50, time.Second, func(_ context.Context, jobs []*handler.Job) []error { return make([]error, len(jobs)) })), worker.Concurrency(20)},
			`Handle("bulk"): a batch of 50 jobs needs Concurrency(50) or more`},
		{"zero bytes in hand", []worker.Option{worker.MaxBytesInHand(0)}, "MaxBytesInHand(0): must be positive"},
		{"negative bytes in hand", []worker.Option{worker.MaxBytesInHand(-1)}, "MaxBytesInHand(-1): must be positive"},
		{"key limit unhandled topic", []worker.Option{worker.KeyLimit("other", worker.Keys{Key: worker.RecordKey})}, `KeyLimit("other"): no handler for the topic`},
		{"key limit twice", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey}), worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey})}, `KeyLimit("jobs"): the topic's key limit is set twice`},
		{"key limit no key", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Concurrency: 2})}, `KeyLimit("jobs"): Keys.Key is nil`},
		{"key limit negative concurrency", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey, Concurrency: -1})}, "Keys.Concurrency(-1) must not be negative"},
		{"key rate without interval", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey, Rate: 5})}, "Keys.Rate(5) needs Keys.Per"},
		{"key interval without rate", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey, Per: time.Second})}, "Keys.Per(1s) without Keys.Rate"},
		{"key rate negative", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey, Rate: -1, Per: time.Second})}, "Keys.Rate(-1) must not be negative"},
		{"key break negative", []worker.Option{worker.KeyLimit("jobs", worker.Keys{Key: worker.RecordKey, BreakAfter: -1})}, "Keys.BreakAfter(-1) must not be negative"},
		{"share group option", []worker.Option{worker.ClientOpts(kgo.ClientID("x"), kgo.ShareGroup("other"))}, "ClientOpts: option 1 is a franz-go group option"},
		{"consumer group option", []worker.Option{worker.ClientOpts(kgo.ConsumerGroup("other"))}, "ClientOpts: option 0 is a franz-go group option"},
		{"share ack callback", []worker.Option{worker.ClientOpts(kgo.ShareAckCallback(nil))}, "group option"},
		{"consume topics", []worker.Option{worker.ClientOpts(kgo.ConsumeTopics("t"))}, "ClientOpts: option 0 is a franz-go consumer option"},
		{"nil client option", []worker.Option{worker.ClientOpts(nil)}, "ClientOpts: option 0 is nil"},
		{"negative job timeout", []worker.Option{worker.JobTimeout(-time.Second)}, "JobTimeout(-1s): must not be negative (0 means no job timeout)"},
		{"job timeout past max hold", []worker.Option{worker.MaxHold(time.Minute), worker.JobTimeout(time.Minute)}, "JobTimeout(1m0s) is not below MaxHold(1m0s)"},
		{"negative topic timeout", []worker.Option{worker.TopicJobTimeout("jobs", -time.Second)}, `TopicJobTimeout("jobs", -1s): must not be negative`},
		{"topic timeout past max hold", []worker.Option{worker.TopicJobTimeout("jobs", time.Hour)}, `TopicJobTimeout("jobs", 1h0m0s) is not below MaxHold(30m0s)`},
		{"topic timeout of no handler", []worker.Option{worker.TopicJobTimeout("other", time.Second)}, `TopicJobTimeout("other", 1s): no handler for the topic`},
		{"topic timeout twice", []worker.Option{worker.TopicJobTimeout("jobs", time.Second), worker.TopicJobTimeout("jobs", 2*time.Second)}, `TopicJobTimeout("jobs", 2s): the topic's timeout is set twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.opts
			if !strings.HasPrefix(tc.name, "no ") {
				opts = append(append([]worker.Option{}, valid...), tc.opts...)
			}
			w, err := worker.New(opts...)
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
	if _, err := worker.New(valid...); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if _, err := worker.New(append(valid, worker.JobTimeout(0), worker.TopicJobTimeout("jobs", time.Minute))...); err != nil {
		t.Fatalf("valid job timeouts: %v", err)
	}
	for _, o := range []worker.Option{
		worker.SessionTimeout(0), worker.SessionTimeout(time.Second), worker.SessionTimeout(time.Hour),
		worker.DeliveryLimit(25), worker.SpareDeliveries(24), worker.Handle(strings.Repeat("t", 249), nop), worker.Handle("a.B_c-9", nop),
		worker.Group("team.jobs-1_x"), worker.MaxBytesInHand(1),
	} {
		if _, err := worker.New(append(valid, o)...); err != nil {
			t.Errorf("valid option: %v", err)
		}
	}
}

// One mistake, one error: a nil handler is not also "no handlers", and a
// bad Concurrency says nothing of anything derived from it.
func TestNewReportsOneErrorPerMistake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []worker.Option
	}{
		{"nil handler", []worker.Option{worker.Brokers("b:1"), worker.Group("g"), worker.Handle("", nil)}},
		{"negative concurrency", []worker.Option{worker.Brokers("b:1"), worker.Group("g"), worker.Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })), worker.Concurrency(-1)}},
	} {
		_, err := worker.New(tc.opts...)
		if err == nil {
			t.Fatalf("%s: New accepted it", tc.name)
		}
		if n := strings.Count(err.Error(), "worker: "); n != 1 {
			t.Errorf("%s: %d errors, want 1: %v", tc.name, n, err)
		}
	}
}

func TestNewReportsEveryBadOption(t *testing.T) {
	t.Parallel()
	_, err := worker.New(worker.Concurrency(0), worker.MaxHold(-1))
	for _, want := range []string{"Brokers", "Group", "Handle", "Concurrency(0)", "MaxHold(-1ns)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
