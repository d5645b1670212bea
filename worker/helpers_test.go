package worker_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/workertest"
	"github.com/shareq/shareq/worker"
)

// bundle is what a worker test works with: a cluster, a topic and a group
// of its own, and a recorder of the worker's events.
type bundle struct {
	c     *kafkatest.Cluster
	topic string
	group string
	obs   *recorder
}

func setup(t *testing.T, partitions int32, opts ...kafkatest.Option) *bundle {
	t.Helper()
	c := kafkatest.New(t, opts...)
	return &bundle{c: c, topic: c.Topic(t, partitions), group: c.Group(t), obs: newRecorder()}
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
		worker.Logger(testLogger(t)),
		worker.ShutdownTimeout(5 * time.Second),
	}
	w, err := worker.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop = kafkatest.Run(t, w.Run)
	return stop
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// finished is one JobFinished event.
type finished = workertest.Event

// recorder keeps every event the worker reports.
type recorder struct{ *workertest.Recorder }

func newRecorder() *recorder { return &recorder{workertest.NewRecorder()} }

func (r *recorder) snapshot() []finished { return r.Events() }

// waitFor waits until cond holds for the finished events, or fails t.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]finished) bool) []finished {
	t.Helper()
	return r.WaitFor(t, timeout, what, func(fs []finished) string { return "finished: " + summarize(fs) }, cond)
}

func summarize(fs []finished) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "[%s #%d %v ran=%v err=%v] ", f.Key, f.Count, f.Res.Ack, f.Res.Ran, f.Res.Err)
	}
	return b.String()
}

func count(fs []finished, key string, ack worker.Ack) int {
	n := 0
	for _, f := range fs {
		if f.Key == key && f.Res.Ack == ack {
			n++
		}
	}
	return n
}

var errRetry = errors.New("not yet")
