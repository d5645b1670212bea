package worker_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// bundle is what a worker test works with: a cluster, a topic and a group
// of its own, and a recorder of the worker's events.
type bundle struct {
	c     *kafkatest.Cluster
	topic string
	group string
	obs   *shareqtest.Observer
}

func setup(t *testing.T, partitions int32, opts ...kafkatest.Option) *bundle {
	t.Helper()
	c := kafkatest.New(t, opts...)
	return &bundle{c: c, topic: c.Topic(t, partitions), group: c.Group(t), obs: new(shareqtest.Observer)}
}

// produce writes jobs with the given keys (values are the keys too).
func (b *bundle) produce(t *testing.T, keys ...string) {
	t.Helper()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: b.topic, Key: []byte(k), Value: []byte(k)}
	}
	b.c.Produce(t, recs...)
}

// start runs a worker for the bundle's topic until the returned stop is
// called (or the test ends) and returns Run's error from stop.
func (b *bundle) start(t *testing.T, h handler.Handler, opts ...worker.Option) (stop func() error) {
	t.Helper()
	base := []worker.Option{
		worker.Brokers(b.c.Seeds...),
		worker.Group(b.group),
		worker.Handle(b.topic, h),
		worker.Observers(b.obs),
		worker.Logger(shareqtest.Logger()),
		worker.ShutdownTimeout(5 * time.Second),
	}
	w, err := worker.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop = kafkatest.Run(t, w.Run)
	return stop
}

// finished is one JobFinished event.
type finished = shareqtest.Event

func count(fs []finished, key string, ack worker.Ack) int {
	n := 0
	for _, f := range fs {
		if f.Key == key && f.Result.Ack == ack {
			n++
		}
	}
	return n
}

var errRetry = errors.New("not yet")

// wantGroupConfigs waits until group's configs named (those of want
// when none are) describe as want says, and fails after 20 s with the
// last ones described: Kafka can describe the old value for a moment
// after a set.
func wantGroupConfigs(t *testing.T, c *kafkatest.Cluster, group string, want map[string]string, names ...string) {
	t.Helper()
	if len(names) == 0 {
		names = slices.Collect(maps.Keys(want))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		got, err := groupcfg.Describe(ctx, c.Client(t), group, names...)
		if err == nil && maps.Equal(got, want) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s %s: group %s configs %v (%v), want %v", c.Kind, c.Version, group, got, err, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// holding returns a handler that holds the job keyed "hold" until release
// closes (or its context ends) and ends every other job at once.
func holding(release <-chan struct{}) handler.Handler {
	return handler.Func(func(ctx context.Context, j *handler.Job) error {
		if string(j.Key) == "hold" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
}
