package pgjoblog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// jobRecord is a record of topic carrying job ID id.
func jobRecord(topic, id string) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: []byte(id), Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(id)}}}
}

// testWorker runs a worker observed by l on a new topic of c until t
// ends; its handler is h, behind the dlq middleware.
func testWorker(t *testing.T, c *kafkatest.Cluster, l *Log, topic string, h handler.Handler) {
	t.Helper()
	dlqTopic := c.Topic(t, 1)
	park, err := dlq.Middleware(c.Client(t), dlq.Topic(dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(c.Group(t)), worker.Handle(topic, park(h)),
		worker.RetryBackoff(func(int32) time.Duration { return 10 * time.Millisecond }),
		worker.ClientOpts(kgo.ClientID("joblog-test")), worker.Observers(l), worker.Logger(shareqtest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.Run(t, w.Run)
}

// A worker's runs land in the job log: one row per delivery, with its
// outcome, acknowledgement, error and the worker's client ID (once the
// worker's first member snapshot came: "" before).
func TestWorkerRuns(t *testing.T) {
	pool := migrated(t)
	l, err := New(pool, FlushEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		switch {
		case job.ID() == "retry" && job.DeliveryCount == 1:
			return errors.New("not yet")
		case job.ID() == "park":
			return handler.Permanent(errors.New("never"))
		}
		return nil
	})
	testWorker(t, c, l, topic, h)
	c.Produce(t, jobRecord(topic, "ok"), jobRecord(topic, "retry"), jobRecord(topic, "park"))
	waitFor(t, "4 runs", func() bool { return rowCount(t, pool) == 4 })

	want := map[string][]Run{
		"ok":    {{DeliveryCount: 1, Outcome: "succeeded", Ack: "accept"}},
		"retry": {{DeliveryCount: 2, Outcome: "succeeded", Ack: "accept"}, {DeliveryCount: 1, Outcome: "retried", Ack: "release", Error: "not yet"}},
		"park":  {{DeliveryCount: 1, Outcome: "parked", Ack: "accept", Error: "never"}},
	}
	for id, want := range want {
		runs, err := l.Runs(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != len(want) {
			t.Fatalf("%s: %d runs, want %d: %+v", id, len(runs), len(want), runs)
		}
		for i, r := range runs {
			w := want[i]
			if r.DeliveryCount != w.DeliveryCount || r.Outcome != w.Outcome || r.Ack != w.Ack || !strings.Contains(r.Error, w.Error) || (w.Error == "") != (r.Error == "") ||
				r.Topic != topic || (r.Worker != "" && r.Worker != "joblog-test") || r.Ended.Before(r.Started) {
				t.Errorf("%s run %d: %+v, want %+v", id, i, r, w)
			}
		}
	}
}

// A handler's result and progress: the progress of the running job is
// readable within a second or so (Log.Progress), and its run keeps the
// result and the last progress.
func TestWorkerResultAndProgress(t *testing.T) {
	pool := migrated(t)
	l, err := New(pool, FlushEvery(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		for i := range 1000 { // many calls: at most one write a second
			job.Progress(i/20, "resizing")
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		job.Progress(100, "done")
		return job.SetResult(map[string]string{"url": "s3://thumbs/1.png"})
	})
	testWorker(t, c, l, topic, h)
	c.Produce(t, jobRecord(topic, "thumb"))
	waitFor(t, "the running job's progress", func() bool {
		p, ok, err := l.Progress(t.Context(), "thumb")
		if err != nil {
			t.Fatal(err)
		}
		return ok && p.Percent == 49 && p.Message == "resizing"
	})
	close(release)
	waitFor(t, "the run", func() bool { return rowCount(t, pool) == 1 })
	runs, err := l.Runs(t.Context(), "thumb")
	if err != nil {
		t.Fatal(err)
	}
	r := runs[0]
	if string(r.Result) != `{"url": "s3://thumbs/1.png"}` || r.Progress == nil || r.Progress.Percent != 100 || r.Progress.Message != "done" {
		t.Fatalf("run: result %s, progress %+v", r.Result, r.Progress)
	}
}

// With Postgres down the worker runs every job; the log warns once about
// the writes, and the runs it kept are written once Postgres is back.
func TestWorkerWithPostgresDown(t *testing.T) {
	pool := migrated(t)
	db := &switchable{Pool: pool}
	db.down.Store(true)
	logs := &lines{}
	l, err := New(db, FlushEvery(20*time.Millisecond), Logger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)
	c := kafkatest.New(t)
	topic := c.Topic(t, 3)
	var done atomic.Int64
	testWorker(t, c, l, topic, handler.Func(func(context.Context, *handler.Job) error { done.Add(1); return nil }))
	const n = 300
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = jobRecord(topic, fmt.Sprint("j", i))
	}
	c.Produce(t, recs...)
	waitFor(t, "every job run", func() bool { return done.Load() == n })
	waitFor(t, "the warnings", func() bool { return logs.count(slog.LevelWarn) >= 2 })
	if got := logs.count(slog.LevelWarn); got != 2 {
		t.Errorf("%d warnings, want 2 (the partition upkeep, the writes): %v", got, logs.recs)
	}
	db.down.Store(false)
	waitFor(t, "every run written", func() bool { return rowCount(t, pool) == n })
	waitFor(t, "the info line", func() bool { return logs.count(slog.LevelInfo) == 1 })
}
