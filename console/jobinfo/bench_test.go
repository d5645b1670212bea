package jobinfo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/internal/kafkatest"
)

// capture is a dlq.Producer that keeps the records the middleware parks,
// so that the benchmark's setup writes them in batches.
type capture struct{ recs []*kgo.Record }

func (c *capture) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		c.recs = append(c.recs, r)
		out[i] = kgo.ProduceResult{Record: r}
	}
	return out
}

// BenchmarkFindParked looks a job up in a DLQ topic of 100,000 parked jobs
// (one partition) as the job page and jobs show -dlq do: with the default
// scan limit (the newest 20,000 records) and with none (the whole topic,
// as before the limit). It reports the records fetched per lookup.
//
//	SHAREQ_TEST_BROKERS=127.0.0.1:19092 go test ./console/jobinfo -run '^$' -bench FindParked -benchtime 5x
func BenchmarkFindParked(b *testing.B) {
	const parked = 100_000
	c := kafkatest.New(b)
	topic := c.Topic(b, 1)
	dlqTopic := topic + dlq.TopicSuffix
	c.CreateTopic(b, dlqTopic, 1)
	cap := &capture{}
	parkJobs(b, cap, topic, 0, parked)
	cl := c.Client(b)
	for i := 0; i < len(cap.recs); i += 5000 {
		if err := cl.ProduceSync(context.Background(), cap.recs[i:min(i+5000, len(cap.recs))]...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name  string
		limit int
	}{{"newest-20000", jobinfo.ScanLimitDefault}, {"whole", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			fetched := &countRecords{topic: dlqTopic}
			reader := c.Client(b, kgo.WithHooks(fetched))
			for b.Loop() {
				ps, _, err := jobinfo.FindParked(context.Background(), reader, []string{dlqTopic}, fmt.Sprintf("%s-%d", topic, parked-10), bc.limit)
				if err != nil || len(ps) != 1 {
					b.Fatalf("%+v, %v", ps, err)
				}
			}
			b.ReportMetric(float64(fetched.n.Load())/float64(b.N), "records/lookup")
		})
	}
}
