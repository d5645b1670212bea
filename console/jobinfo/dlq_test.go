package jobinfo_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

// countRecords counts the records of one topic a client fetches.
type countRecords struct {
	topic string
	n     atomic.Int64
}

func (c *countRecords) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	if r.Topic == c.topic {
		c.n.Add(1)
	}
}

// parkJobs parks jobs TOPIC-from to TOPIC-(to-1) of topic through the
// dlq middleware writing to p, one record each, in that order (job IDs
// of the test's own: on a shared broker other tests' DLQ topics are
// searched too).
func parkJobs(t testing.TB, p dlq.Producer, topic string, from, to int) {
	t.Helper()
	mw, err := dlq.Middleware(p, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	fail := handler.Chain(handler.Func(func(context.Context, *handler.Job) error {
		return handler.Permanent(errors.New("bad input"))
	}), mw)
	for i := from; i < to; i++ {
		job := &handler.Job{Topic: topic, Offset: int64(i), Value: []byte(`{}`), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5,
			Headers: []handler.Header{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "%s-%d", topic, i)}}}
		if _, parked := handler.ParkedOf(fail.Handle(t.Context(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
}

// FindParked reads a DLQ topic newest first and stops at its scan
// limit: a job among the newest records is found, one older than the
// limit is not searched for, which the search says (it is not reported
// as not parked), and the records fetched are the limit's, not the
// topic's. With no limit, the older job is found.
func TestFindParkedScanLimit(t *testing.T) {
	t.Parallel()
	const parked, limit = 150, 100
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(t, dlqTopic, 1)
	parkJobs(t, c.Client(t), topic, 0, parked)

	fetched := &countRecords{topic: dlqTopic}
	reader := c.Client(t, kgo.WithHooks(fetched))
	ctx := t.Context()

	ps, searched, err := jobinfo.FindParked(ctx, reader, []string{dlqTopic}, topic+"-140", limit)
	if err != nil || len(ps) != 1 || ps[0].JobID() != topic+"-140" || ps[0].Offset != 140 {
		t.Fatalf("a job among the newest %d: %+v, %v", limit, ps, err)
	}
	want := jobinfo.Search{Topic: dlqTopic, Scanned: limit, Partial: true}
	if len(searched) != 1 || searched[0] != want {
		t.Fatalf("searched %+v, want %+v", searched, want)
	}
	t.Logf("looking for job 140: fetched %d records of %s", fetched.n.Load(), dlqTopic)
	if got := fetched.n.Load(); got == 0 || got > limit {
		t.Errorf("fetched %d records of %s looking for job 140, want some, at most the limit %d", got, dlqTopic, limit)
	}

	fetched.n.Store(0)
	ps, searched, err = jobinfo.FindParked(ctx, reader, []string{dlqTopic}, topic+"-10", limit)
	if err != nil || len(ps) != 0 || len(searched) != 1 {
		t.Fatalf("a job older than the limit: %+v, %+v, %v", ps, searched, err)
	}
	if got, want := searched[0].NotSearched(), fmt.Sprintf("searched the newest %d records of %s; older ones not searched", limit, dlqTopic); got != want {
		t.Errorf("NotSearched() = %q, want %q", got, want)
	}
	if got := fetched.n.Load(); got == 0 || got > limit {
		t.Errorf("fetched %d records of %s looking for job 10, want some, at most the limit %d", got, dlqTopic, limit)
	}

	ps, searched, err = jobinfo.FindParked(ctx, reader, []string{dlqTopic}, topic+"-10", 0)
	if err != nil || len(ps) != 1 || ps[0].JobID() != topic+"-10" {
		t.Fatalf("with no scan limit: %+v, %v", ps, err)
	}
	if want := (jobinfo.Search{Topic: dlqTopic, Scanned: parked}); searched[0] != want || searched[0].NotSearched() != "" {
		t.Errorf("with no scan limit, searched %+v, want %+v", searched[0], want)
	}
}

// The scan limit is the topic's, shared among its partitions; every DLQ
// topic of the cluster is searched and reported.
func TestFindParkedAllSharesLimit(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(t, dlqTopic, 2)
	cl := c.Client(t, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	parkJobs(t, cl, topic, 0, 40)

	fetched := &countRecords{topic: dlqTopic}
	ps, searched, err := jobinfo.FindParkedAll(t.Context(), c.Client(t, kgo.WithHooks(fetched)), topic+"-39", 20)
	if err != nil || len(ps) != 1 || ps[0].JobID() != topic+"-39" {
		t.Fatalf("job 39: %+v, %v", ps, err)
	}
	var mine *jobinfo.Search
	for i := range searched {
		if searched[i].Topic == dlqTopic {
			mine = &searched[i]
		}
	}
	if mine == nil || mine.Scanned != 20 || !mine.Partial {
		t.Fatalf("searched %+v: want %s read 20 records (10 a partition), older ones not", searched, dlqTopic)
	}
	if got := fetched.n.Load(); got == 0 || got > 20 {
		t.Errorf("fetched %d records of %s, want some, at most 20", got, dlqTopic)
	}
}
