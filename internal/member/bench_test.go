package member_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/member"
)

// BenchmarkNoopAccept measures no-op jobs: 20,000 small records over 6
// partitions, each accepted as soon as it is delivered, with a credit of
// 2,000; a raw franz-go share consumer (default settings, accepting every
// record it polls) runs the same load in the same process as the
// baseline. It reports both rates (records/s, join included) and their
// ratio. Run it with -benchtime=1x.
func BenchmarkNoopAccept(b *testing.B) {
	c := kafkatest.New(b)
	const partitions, n, credit = 6, 20000, 2000
	var memberRate, rawRate float64
	for b.Loop() {
		topic, group := c.Topic(b, partitions), c.Group(b)
		produce(b, c, topic, partitions, n)
		memberRate = benchMember(b, c, group, topic, n, credit)

		topic, group = c.Topic(b, partitions), c.Group(b)
		produce(b, c, topic, partitions, n)
		rawRate = benchRaw(b, c, group, topic, n)
	}
	b.ReportMetric(memberRate, "member-records/s")
	b.ReportMetric(rawRate, "raw-records/s")
	b.ReportMetric(memberRate/rawRate, "ratio")
}

func benchMember(b *testing.B, c *kafkatest.Cluster, group, topic string, n, credit int) float64 {
	began := time.Now()
	r := start(b, c, group, []string{topic})
	r.mu.Lock()
	r.onDelivery = func(d member.Delivery) {
		r.m.Ack(d.Key(), member.Accept)
		r.m.Grant(1)
	}
	r.mu.Unlock()
	r.m.Grant(credit)
	r.waitFor("a delivery", func() bool { return len(r.deliveries) > 0 })
	r.discardEvents()
	b.Logf("%s: member: first delivery after %v", c.Kind, time.Since(began))
	r.waitFor("every record fetched", func() bool { return r.m.Stats().Fetched >= int64(n) })
	b.Logf("%s: member: every record fetched after %v, %d fetches", c.Kind, time.Since(began), r.m.Stats().Fetches)
	r.waitFor("every record accepted", func() bool { return r.m.Stats().Acks[member.Accept] >= int64(n) })
	rate := float64(n) / time.Since(began).Seconds()
	r.leave()
	if s := r.m.Stats(); s.AckErrors != 0 || s.Fetched != int64(n) {
		b.Errorf("member stats %+v", s)
	}
	return rate
}

func benchRaw(b *testing.B, c *kafkatest.Cluster, group, topic string, n int) float64 {
	began := time.Now()
	cl := c.Client(b, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("raw consumer: %d of %d records within %v", got, n, 2*wait)
		}
		for _, rec := range fs.Records() {
			rec.Ack(kgo.AckAccept)
			got++
		}
	}
	if err := cl.FlushAcks(ctx); err != nil {
		b.Fatalf("raw consumer: FlushAcks: %v", err)
	}
	rate := float64(n) / time.Since(began).Seconds()
	cl.Close()
	return rate
}

// BenchmarkMemberNoop measures the member alone: b.N small records over 6
// partitions, each accepted and its credit granted back as soon as it is
// delivered, at a credit of 24 (the worker's default Concurrency), 1,000,
// 2,000 (BenchmarkNoopAccept's) and 10,000 (where a scan of the held or
// pending records per step would show). The clock and the allocation count
// start after the join's first delivery, so ns/op and allocs/op are per
// record, the broker's share included (kfake runs in this process);
// cpu-ns/record is the process's CPU time (user and system) per record:
// the member's and the client's alone on a real broker, whatever else
// the machine runs.
//
//	go test -run '^$' -bench MemberNoop -benchtime 100000x ./internal/member
func BenchmarkMemberNoop(b *testing.B) {
	for _, credit := range []int{24, 1000, 2000, 10000} {
		b.Run(fmt.Sprintf("credit=%d", credit), func(b *testing.B) {
			c := kafkatest.New(b)
			const partitions = 6
			topic, group := c.Topic(b, partitions), c.Group(b)
			n := b.N + 1 // one to join with, outside the clock
			produce(b, c, topic, partitions, n)
			r := start(b, c, group, []string{topic})
			r.mu.Lock()
			r.onDelivery = func(d member.Delivery) {
				r.m.Ack(d.Key(), member.Accept)
				r.m.Grant(1)
			}
			r.mu.Unlock()
			r.m.Grant(1)
			r.waitFor("the first delivery", func() bool { return len(r.deliveries) > 0 })
			r.discardEvents()
			b.ReportAllocs()
			b.ResetTimer()
			began, cpu := time.Now(), cpuTime(b)
			r.m.Grant(credit - 1)
			r.waitFor("every record accepted", func() bool { return r.m.Stats().Acks[member.Accept] >= int64(n) })
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "records/s")
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/record")
			s := r.m.Stats()
			b.ReportMetric(float64(s.Fetches), "fetches")
			r.leave()
			if s.AckErrors != 0 || s.Fetched != int64(n) {
				b.Errorf("member stats %+v", s)
			}
		})
	}
}

// cpuTime is the process's CPU time so far (user and system), in ns.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkMemberAcquireMode measures what batch_optimized acquisition
// saves: the member alone (as BenchmarkMemberNoop) at a credit of 1,000 on
// b.N records written in producer batches of about 130 records (16 KiB),
// with every fetch record_limit, and with the member's choice (it fetches
// batch_optimized once it has seen the batches and its credit covers
// them). It reports records/s, CPU per record, fetches and the records
// delivered past the credit.
//
//	go test -run '^$' -bench MemberAcquireMode -benchtime 100000x ./internal/member
func BenchmarkMemberAcquireMode(b *testing.B) {
	for _, mode := range []string{"record_limit", "chosen"} {
		b.Run(mode, func(b *testing.B) {
			member.RecordLimitOnly(mode == "record_limit")
			defer member.RecordLimitOnly(false)
			c := kafkatest.New(b)
			const partitions, credit = 6, 1000
			topic, group := c.Topic(b, partitions), c.Group(b)
			n := b.N + 1 // one to join with, outside the clock
			cl := c.Client(b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerLinger(0))
			value := make([]byte, 100)
			recs := make([]*kgo.Record, n)
			for i := range recs {
				recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: value}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err := cl.ProduceSync(ctx, recs...).FirstErr()
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			r := start(b, c, group, []string{topic})
			r.mu.Lock()
			r.onDelivery = func(d member.Delivery) {
				r.m.Ack(d.Key(), member.Accept)
				r.m.Grant(1)
			}
			r.mu.Unlock()
			r.m.Grant(1)
			r.waitFor("the first delivery", func() bool { return len(r.deliveries) > 0 })
			r.discardEvents()
			b.ResetTimer()
			began, cpu := time.Now(), cpuTime(b)
			r.m.Grant(credit - 1)
			r.waitFor("every record accepted", func() bool { return r.m.Stats().Acks[member.Accept] >= int64(n) })
			b.StopTimer()
			s := r.m.Stats()
			b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "records/s")
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/record")
			b.ReportMetric(float64(s.Fetches), "fetches")
			b.ReportMetric(float64(s.BatchFetches), "batch-fetches")
			b.ReportMetric(float64(s.OverCredit), "over-credit")
			r.leave()
			if s.AckErrors != 0 || s.Fetched != int64(n) {
				b.Errorf("member stats %+v", s)
			}
		})
	}
}
