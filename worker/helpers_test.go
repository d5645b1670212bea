package worker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
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
		worker.WithObserver(b.obs),
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
