package dlq

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

// benchDLQ is a one-partition DLQ topic holding n parked jobs of 1 KiB
// each, every other one replayed (with its marker), on kfake or the
// broker of SHAREQ_TEST_BROKERS.
func benchDLQ(b *testing.B, n int) (*kgo.Client, string) {
	b.Helper()
	c := kafkatest.New(b)
	cl := c.Client(b, kgo.FetchMaxWait(100*time.Millisecond))
	topic := c.Topic(b, 1)
	value := bytes.Repeat([]byte("x"), 1024)
	var recs []*kgo.Record
	for i := range n {
		env := Envelope{Reason: "permanent", Error: "nope", DeliveryCount: 1, SourceTopic: "jobs", SourceOffset: int64(i), ParkedAt: time.Now()}
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: value, Headers: env.headers()})
	}
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	var marks []*kgo.Record
	for i := 0; i < n; i += 2 {
		marks = append(marks, markerRecord(&Parked{Topic: topic, Offset: int64(i)}, &kgo.Record{Topic: "jobs", Offset: int64(n + i)}, time.Now()))
	}
	if err := c.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, marks...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	return cl, topic
}

// BenchmarkListPage lists a page of 50 at the start and at the end of a
// partition of 20,000 parked jobs (and 10,000 markers): a page reads from
// its first offset to the partition's end, for the markers.
//
//	SHAREQ_TEST_BROKERS=127.0.0.1:9092 go test -run '^$' -bench ListPage -benchtime 5x ./dlq/
func BenchmarkListPage(b *testing.B) {
	const n = 20000
	cl, topic := benchDLQ(b, n)
	for _, bc := range []struct {
		name string
		from int64
	}{{"first", 0}, {"middle", n / 2}, {"last", n - 50}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ps, err := List(context.Background(), cl, topic, Filter{Offsets: OffsetRange{From: bc.from}}, 50)
				if err != nil || len(ps) != 50 || !ps[0].Replayed() {
					b.Fatalf("List: %d, %v", len(ps), err)
				}
			}
		})
	}
}

// BenchmarkListByJobIDBrokerRecords finds one job by its ID in a broker
// dead-letter topic of 5,000 records (values of 1 KiB, copied): List
// reads every record's source record back, 128 at a time, for the job
// IDs that only the source records hold. "all" lists the same topic
// unfiltered, whose page of 50 reads only its own source records;
// "replay-job-id" is a dry-run Replay of that job ID, which finds the
// job the same way.
//
//	SHAREQ_TEST_BROKERS=127.0.0.1:9092 go test -run '^$' -bench ListByJobID -benchtime 5x ./dlq/
func BenchmarkListByJobIDBrokerRecords(b *testing.B) {
	const n = 5000
	c := kafkatest.New(b)
	cl := c.Client(b, kgo.FetchMaxWait(100*time.Millisecond))
	src, topic := c.Topic(b, 1), c.Topic(b, 1)
	value := bytes.Repeat([]byte("x"), 1024)
	var jobs, dead []*kgo.Record
	for i := range n {
		key := fmt.Appendf(nil, "k%d", i)
		jobs = append(jobs, &kgo.Record{Topic: src, Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: handler.JobIDHeader, Value: fmt.Appendf(nil, "id-%d", i)}}})
		dead = append(dead, brokerRecordOf(topic, src, int64(i), key, value))
	}
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, jobs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, dead...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		f     Filter
		limit int
	}{{"job-id", Filter{JobID: fmt.Sprintf("id-%d", n-10)}, 0}, {"all", Filter{}, 50}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ps, err := List(ctx, cl, topic, bc.f, bc.limit)
				if err != nil || len(ps) == 0 || !ps[0].Restored {
					b.Fatalf("List: %d, %v", len(ps), err)
				}
			}
		})
	}
	b.Run("replay-job-id", func(b *testing.B) {
		for b.Loop() {
			st, err := Replay(ctx, cl, topic, ReplayFilter(Filter{JobID: fmt.Sprintf("id-%d", n-10)}), ReplayDryRun(), ReplayLogger(quiet))
			if err != nil || st.Replayed != 1 {
				b.Fatalf("Replay: %+v, %v", st, err)
			}
		}
	})
}
