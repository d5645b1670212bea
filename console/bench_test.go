package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

// benchParked is how many jobs the DLQ of BenchmarkDLQPage holds.
const benchParked = 100_000

// capture is a dlq.Producer that keeps the records the middleware
// parks, so that the benchmark's setup writes them in batches.
type capture struct{ recs []*kgo.Record }

func (c *capture) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		c.recs = append(c.recs, r)
		out[i] = kgo.ProduceResult{Record: r}
	}
	return out
}

// countRecords counts the records a client fetches.
type countRecords struct{ n atomic.Int64 }

func (c *countRecords) OnFetchRecordUnbuffered(*kgo.Record, bool) { c.n.Add(1) }

// BenchmarkDLQPage reads pages of a DLQ topic of 100,000 parked jobs (one
// partition) as the DLQ page does: the first page, the first page of a
// filter on a reason 1 in 100 jobs have, of a text 1 in 1,000 jobs' error
// holds, and a page from the middle of the topic. It reports, per page,
// the records fetched (the windows read back, the first on to the end of
// the partition for the replay markers, and what each window's fetches
// bring back past its end, up to the client's fetch size), the windows
// read and the jobs found (fewer than a page when the scan limit, 20,000
// offsets, was reached first).
//
//	SHAREQ_TEST_BROKERS=127.0.0.1:19092 go test ./console -run '^$' -bench DLQPage -benchtime 20x
func BenchmarkDLQPage(b *testing.B) {
	c := kafkatest.New(b)
	topic := c.Topic(b, 1)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(b, dlqTopic, 1)
	cap := &capture{}
	mw, err := dlq.Middleware(cap, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchParked {
		reason, msg := handler.ReasonPermanent, fmt.Sprintf("resize image %d: unsupported colour profile", i)
		if i%100 == 0 {
			reason = handler.ReasonDecode
		}
		if i%1000 == 1 {
			msg = fmt.Sprintf("resize image %d: needle in the error", i)
		}
		job := &handler.Job{Topic: topic, Offset: int64(i), Value: fmt.Appendf(nil, `{"image":%d}`, i), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5}
		fail := handler.Func(func(context.Context, *handler.Job) error {
			return &handler.PermanentError{Reason: reason, Err: errors.New(msg)}
		})
		if _, parked := handler.ParkedOf(handler.Chain(fail, mw).Handle(context.Background(), job)); !parked {
			b.Fatalf("job %d not parked", i)
		}
	}
	cl := c.Client(b)
	ctx := context.Background()
	for i := 0; i < len(cap.recs); i += 5000 {
		if err := cl.ProduceSync(ctx, cap.recs[i:min(i+5000, len(cap.recs))]...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}

	for _, bc := range []struct {
		name string
		f    dlq.Filter
		cur  cursor
	}{
		{"first", dlq.Filter{}, nil},
		{"reason-1pc", dlq.Filter{Reason: handler.ReasonDecode}, nil},
		{"text-0.1pc", dlq.Filter{Text: "needle"}, nil},
		{"middle", dlq.Filter{}, cursor{0: benchParked / 2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var fetched countRecords
			reader := c.Client(b, kgo.WithHooks(&fetched), kgo.FetchMaxWait(100*time.Millisecond))
			var res pageResult
			for b.Loop() {
				res, err = readPage(ctx, reader, dlqTopic, bc.f, bc.cur, PageSizeDefault, ScanLimitDefault)
				if err != nil {
					b.Fatal(err)
				}
			}
			if len(res.Jobs) != PageSizeDefault && !res.Capped || len(res.Jobs) == 0 {
				b.Fatalf("a page of %d jobs (scan limit reached: %v), want %d", len(res.Jobs), res.Capped, PageSizeDefault)
			}
			b.ReportMetric(float64(fetched.n.Load())/float64(b.N), "records/page")
			b.ReportMetric(float64(res.Reads), "windows/page")
			b.ReportMetric(float64(len(res.Jobs)), "jobs/page")
		})
	}
}
