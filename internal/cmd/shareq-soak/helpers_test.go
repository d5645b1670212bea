package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// rig is what a bad-input test works with: a cluster, a job topic with
// its DLQ topic, a share group starting at the earliest offset, a plain
// client, and the events of the workers it runs.
type rig struct {
	c     *kafkatest.Cluster
	topic string
	dlq   string
	group string
	cl    *kgo.Client
	obs   *rigObserver
	logs  *logbuf.Buffer
}

// rigObserver is a shareqtest.Observer that also keeps what the bad-input
// tests check beyond the jobs finished: the delivery counts of the jobs
// started, and the topic watch's reports.
type rigObserver struct {
	shareqtest.Observer

	mu      sync.Mutex
	started []int32  // delivery counts of the jobs started
	topics  []string // "missing <topic>", "back <topic>", "recreated <topic>"
}

var _ worker.TopicObserver = (*rigObserver)(nil)

func (o *rigObserver) JobStarted(j *handler.Job) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = append(o.started, j.DeliveryCount)
}

func (o *rigObserver) TopicMissing(topic string, missing bool) {
	what := "back "
	if missing {
		what = "missing "
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.topics = append(o.topics, what+topic)
}

func (o *rigObserver) TopicRecreated(topic string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.topics = append(o.topics, "recreated "+topic)
}

// Started returns the delivery counts of the jobs started so far.
func (o *rigObserver) Started() []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.started)
}

// TopicEvents returns the topic watch's reports so far, in order.
func (o *rigObserver) TopicEvents() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.topics)
}

func newRig(t *testing.T, opts ...kafkatest.Option) *rig {
	t.Helper()
	c := kafkatest.New(t, opts...)
	topic := c.Topic(t, 1)
	r := &rig{c: c, topic: topic, dlq: topic + dlq.TopicSuffix, group: c.Group(t), obs: &rigObserver{}, logs: &logbuf.Buffer{}}
	c.CreateTopic(t, r.dlq, 1)
	r.cl = c.Client(t)
	return r
}

// start runs a worker on the rig's topic with dlq.Middleware (parking
// through the rig's client) outside mws, until the returned stop is called
// or the test ends; stop returns Run's error.
func (r *rig) start(t *testing.T, h handler.Handler, mws []handler.Middleware, opts ...worker.Option) (stop func() error) {
	t.Helper()
	park, err := dlq.Middleware(r.cl, dlq.Logger(r.logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	base := []worker.Option{
		worker.Brokers(r.c.Seeds...),
		worker.Group(r.group),
		worker.Handle(r.topic, h),
		worker.Use(append([]handler.Middleware{park}, mws...)...),
		worker.Observers(r.obs),
		worker.Logger(r.logger(t)),
		worker.ShutdownTimeout(2 * time.Second),
		worker.Concurrency(2),
	}
	w, err := worker.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	stop = kafkatest.Run(t, w.Run)
	return stop
}

// logger writes to the rig's buffer, and to stderr under go test -v.
func (r *rig) logger(t *testing.T) *slog.Logger {
	var w io.Writer = r.logs
	if testing.Verbose() {
		w = io.MultiWriter(r.logs, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (r *rig) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	for _, rec := range recs {
		if rec.Topic == "" {
			rec.Topic = r.topic
		}
	}
	r.c.Produce(t, recs...)
}

// parked reads the rig's DLQ topic with dlq.List.
func (r *rig) parked(t *testing.T) []dlq.Parked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := r.c.Client(t)
	ps, err := dlq.List(ctx, cl, r.dlq, dlq.Filter{}, 0)
	if err != nil {
		t.Fatalf("dlq.List: %v", err)
	}
	return ps
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishedJob is one JobFinished event.
type finishedJob = shareqtest.Event

// heldAt reports whether a job started its delivery n and has not been
// acknowledged yet: a failing one is held in its retry backoff.
func (r *rig) heldAt(n int32) bool {
	started := slices.Contains(r.obs.Started(), n)
	for _, f := range r.obs.Events() {
		if f.Count == n {
			return false
		}
	}
	return started
}

// jobRec returns a record with a job-id header.
func jobRec(id string, value []byte) *kgo.Record {
	return &kgo.Record{Value: value, Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(id)}}}
}

func describe(fs []finishedJob) string {
	var b bytes.Buffer
	for i, f := range fs {
		since := time.Duration(0)
		if i > 0 {
			since = f.At.Sub(fs[0].At)
		}
		fmt.Fprintf(&b, "  +%v %q delivery %d: %v %v\n", since.Round(time.Millisecond), f.ID, f.Count, f.Result.Ack, f.Result.Err)
	}
	return b.String()
}
