package worker_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
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
type finished struct {
	key   string
	count int32
	res   worker.Result
	at    time.Time
}

// recorder is a worker.Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	done     []finished
	started  int
	renewed  int
	renewErr int
	ackErrs  int
	changed  chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) JobStarted(*handler.Job) {
	r.mu.Lock()
	r.started++
	r.mu.Unlock()
}

func (r *recorder) JobFinished(j *handler.Job, res worker.Result) {
	r.mu.Lock()
	r.done = append(r.done, finished{key: string(j.Key), count: j.DeliveryCount, res: res, at: time.Now()})
	r.mu.Unlock()
	r.poke()
}

func (r *recorder) LockRenewed(_ *handler.Job, err error) {
	r.mu.Lock()
	r.renewed++
	if err != nil {
		r.renewErr++
	}
	r.mu.Unlock()
}

func (r *recorder) AckFailed(string, int32, error) {
	r.mu.Lock()
	r.ackErrs++
	r.mu.Unlock()
}

func (r *recorder) LanesActive(int) {}

func (r *recorder) snapshot() []finished {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]finished(nil), r.done...)
}

// waitFor waits until cond holds for the finished events, or fails t.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func([]finished) bool) []finished {
	t.Helper()
	deadline := time.After(timeout)
	for {
		s := r.snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-r.changed:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; finished: %v", timeout, what, summarize(r.snapshot()))
		}
	}
}

func summarize(fs []finished) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "[%s #%d %v ran=%v err=%v] ", f.key, f.count, f.res.Ack, f.res.Ran, f.res.Err)
	}
	return b.String()
}

func count(fs []finished, key string, ack worker.Ack) int {
	n := 0
	for _, f := range fs {
		if f.key == key && f.res.Ack == ack {
			n++
		}
	}
	return n
}

var errRetry = errors.New("not yet")
