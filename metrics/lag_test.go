package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/metrics"
)

// lagBundle is a cluster with a topic of produced records and a share
// group that has accepted some of them.
type lagBundle struct {
	c     *kafkatest.Cluster
	topic string
	group string
	adm   *kadm.Client
}

// setupLag produces n records to a new topic of the given partitions and
// has a raw share consumer of a new group (share.auto.offset.reset
// earliest) accept the first `accept` records it is given, one per poll.
func setupLag(t *testing.T, partitions int32, n, accept int) *lagBundle {
	t.Helper()
	c := kafkatest.New(t)
	b := &lagBundle{c: c, topic: c.Topic(t, partitions), group: c.Group(t), adm: kadm.NewClient(c.Client(t))}
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: b.topic, Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "job-%d", i)}
	}
	c.Produce(t, recs...)

	cl := c.ShareConsumer(t, b.group, []string{b.topic}, kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for accepted := 0; accepted < accept; {
		// Every record of a poll is acked before the next poll: a poll
		// would accept whatever the previous one left unacknowledged.
		fs := cl.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			t.Fatalf("accepted %d of %d records: %v", accepted, accept, ctx.Err())
		}
		for _, r := range fs.Records() {
			r.Ack(kgo.AckAccept)
			accepted++
		}
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatalf("FlushAcks: %v", err)
	}
	return b
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitLagTotal scrapes reg until the topic's lag total is want, and
// returns that scrape.
func waitLagTotal(t *testing.T, reg *prometheus.Registry, group, topic string, want float64) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		mfs := scrape(t, reg)
		if m := series(mfs, "shareq_share_group_lag_total", "group", group, "topic", topic); m != nil && m.GetGauge().GetValue() == want {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("shareq_share_group_lag_total{group=%q,topic=%q} did not reach %v; last scrape: %v",
				group, topic, want, series(mfs, "shareq_share_group_lag_total"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ten records, four accepted: six are left. The same holds on kfake and
// on Apache Kafka (lag = high watermark - start offset - records
// acknowledged or archived past the start offset).
func TestLagAfterAcceptingSome(t *testing.T) {
	t.Parallel()
	b := setupLag(t, 1, 10, 4)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))

	mfs := waitLagTotal(t, reg, b.group, b.topic, 6)
	if got := value(t, mfs, "shareq_share_group_lag", "group", b.group, "topic", b.topic, "partition", "0"); got != 6 {
		t.Errorf("lag{partition=0} = %v, want 6", got)
	}
	// The four accepted records are the first four. kfake moves the start
	// offset past them at once; Apache Kafka persists the start offset
	// lazily, so there it may still trail them.
	start := value(t, mfs, "shareq_share_group_start_offset", "group", b.group, "topic", b.topic, "partition", "0")
	if b.c.Kind == "kfake" && start != 4 || start < 0 || start > 4 {
		t.Errorf("start_offset{partition=0} = %v, want 4 (kfake) or 0..4 (Kafka)", start)
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", b.group); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}
}

// With several partitions, the total is the sum of the partitions that
// have a start offset. A partition no member has fetched from yet has no
// start offset and so no lag (kfake and Kafka alike): the consumer here
// stops after five records, so some partitions may never be fetched. On
// kfake start offset plus lag is a partition's end offset; Apache Kafka's
// start offset may trail (see TestLagAfterAcceptingSome), so there it is
// at most the end offset.
func TestLagTotalSumsPartitions(t *testing.T) {
	t.Parallel()
	b := setupLag(t, 3, 12, 5)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	ends, err := b.adm.ListEndOffsets(context.Background(), b.topic)
	if err != nil {
		t.Fatal(err)
	}

	fake := b.c.Kind == "kfake"
	deadline := time.Now().Add(15 * time.Second)
	for {
		mfs := scrape(t, reg)
		var lagSum, startSum, unstarted float64
		var problems []string
		for p := range int32(3) {
			ps := fmt.Sprint(p)
			end, _ := ends.Lookup(b.topic, p)
			lag, start := series(mfs, "shareq_share_group_lag", "topic", b.topic, "partition", ps), series(mfs, "shareq_share_group_start_offset", "topic", b.topic, "partition", ps)
			if lag == nil {
				unstarted += float64(end.Offset)
				continue
			}
			l, s := lag.GetGauge().GetValue(), start.GetGauge().GetValue()
			if s+l != float64(end.Offset) && (fake || s+l > float64(end.Offset)) {
				problems = append(problems, fmt.Sprintf("partition %d: start %v + lag %v, end offset %d", p, s, l, end.Offset))
			}
			lagSum += l
			startSum += s
		}
		total := series(mfs, "shareq_share_group_lag_total", "topic", b.topic)
		switch {
		case total == nil:
			problems = append(problems, "no lag_total")
		case total.GetGauge().GetValue() != lagSum:
			problems = append(problems, fmt.Sprintf("lag_total %v != sum of partition lags %v", total.GetGauge().GetValue(), lagSum))
		}
		if lagSum+unstarted != 7 || fake && startSum != 5 || startSum > 5 {
			problems = append(problems, fmt.Sprintf("lag %v + unstarted %v, start offsets %v; want 7 left, 5 accepted", lagSum, unstarted, startSum))
		}
		if len(problems) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: %v", problems)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A group no member has joined has no series and is not an error.
func TestLagUnknownGroup(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	adm := kadm.NewClient(c.Client(t))
	reg := prometheus.NewRegistry()
	group := kafkatest.Name(t, "g")
	reg.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagLogger(quietLogger())))

	mfs := scrape(t, reg)
	if mf := mfs["shareq_share_group_lag_total"]; mf != nil {
		t.Errorf("lag series for a group with no state: %v", mf)
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", group); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}
}

// countDescribes counts the DescribeShareGroupOffsets requests kfake
// handles, letting them through.
func countDescribes(t *testing.T, c *kafkatest.Cluster) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	c.Fake().ControlKey(kmsg.DescribeShareGroupOffsets.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		n.Add(1)
		return nil, nil, false
	})
	return &n
}

func requireFake(t *testing.T, c *kafkatest.Cluster) {
	t.Helper()
	if c.Fake() == nil {
		t.Skip("needs kfake to count or fail requests")
	}
}

// Scrapes within the minimum interval reuse the last reading.
func TestLagCachesReadings(t *testing.T) {
	t.Parallel()
	b := setupLag(t, 1, 10, 4)
	requireFake(t, b.c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(time.Hour), metrics.LagLogger(quietLogger())))
	describes := countDescribes(t, b.c)

	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_share_group_lag_total", "topic", b.topic); got != 6 {
		t.Fatalf("lag_total = %v, want 6", got)
	}
	b.c.Produce(t, &kgo.Record{Topic: b.topic, Value: []byte("one more")})
	for range 5 {
		mfs = scrape(t, reg)
	}
	if got := value(t, mfs, "shareq_share_group_lag_total", "topic", b.topic); got != 6 {
		t.Errorf("lag_total within the interval = %v, want the cached 6", got)
	}
	if n := describes.Load(); n != 1 {
		t.Errorf("%d describe requests for 6 scrapes within the interval, want 1", n)
	}

	// With no interval every scrape asks, and sees the new record.
	fresh := prometheus.NewRegistry()
	fresh.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	waitLagTotal(t, fresh, b.group, b.topic, 7)
	scrape(t, fresh)
	if n := describes.Load(); n < 3 {
		t.Errorf("%d describe requests, want one per scrape without an interval", n)
	}
}

// A failed reading counts an error, drops the lag series from that scrape
// (no stale values) and does not fail the scrape; the next good reading
// brings them back.
func TestLagScrapeError(t *testing.T) {
	t.Parallel()
	b := setupLag(t, 1, 10, 4)
	requireFake(t, b.c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	waitLagTotal(t, reg, b.group, b.topic, 6)

	// Fail the next describe with a group-level error.
	b.c.Fake().ControlKey(kmsg.DescribeShareGroupOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
			rg.GroupID = g.GroupID
			rg.ErrorCode = kerr.UnknownServerError.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", b.group); got != 1 {
		t.Errorf("scrape errors = %v, want 1", got)
	}
	for _, name := range []string{"shareq_share_group_lag", "shareq_share_group_lag_total", "shareq_share_group_start_offset"} {
		if mfs[name] != nil {
			t.Errorf("%s exported from a failed reading", name)
		}
	}

	mfs = scrape(t, reg)
	if got := value(t, mfs, "shareq_share_group_lag_total", "topic", b.topic); got != 6 {
		t.Errorf("lag_total after recovery = %v, want 6", got)
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", b.group); got != 1 {
		t.Errorf("scrape errors after recovery = %v, want 1", got)
	}
}

// A reading in which one partition failed exports the others, but no
// total for that topic, and counts one error.
func TestLagPartitionError(t *testing.T) {
	t.Parallel()
	b := setupLag(t, 1, 10, 4)
	requireFake(t, b.c)
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))

	b.c.Fake().ControlKey(kmsg.DescribeShareGroupOffsets.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.DescribeShareGroupOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeShareGroupOffsetsResponse)
		rg := kmsg.NewDescribeShareGroupOffsetsResponseGroup()
		rg.GroupID = b.group
		for _, topic := range []string{b.topic, "other"} {
			rt := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopic()
			rt.Topic = topic
			ok := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
			ok.Partition, ok.StartOffset, ok.Lag = 0, 4, 6
			bad := kmsg.NewDescribeShareGroupOffsetsResponseGroupTopicPartition()
			bad.Partition, bad.StartOffset, bad.Lag = 1, -1, -1
			if topic == b.topic {
				bad.ErrorCode = kerr.UnknownServerError.Code
			}
			rt.Partitions = append(rt.Partitions, ok, bad)
			rg.Topics = append(rg.Topics, rt)
		}
		resp.Groups = append(resp.Groups, rg)
		return resp, nil, true
	})
	mfs := scrape(t, reg)
	if got := value(t, mfs, "shareq_share_group_lag", "topic", b.topic, "partition", "0"); got != 6 {
		t.Errorf("lag of the good partition = %v, want 6", got)
	}
	if m := series(mfs, "shareq_share_group_lag_total", "topic", b.topic); m != nil {
		t.Errorf("a partial lag_total was exported: %v", m)
	}
	// In "other", partition 1 has no start offset yet: no series, no error.
	if got := value(t, mfs, "shareq_share_group_lag_total", "topic", "other"); got != 6 {
		t.Errorf("lag_total of the topic without errors = %v, want 6", got)
	}
	if m := series(mfs, "shareq_share_group_lag", "topic", "other", "partition", "1"); m != nil {
		t.Errorf("lag exported for a partition with no start offset: %v", m)
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", b.group); got != 1 {
		t.Errorf("scrape errors = %v, want 1", got)
	}
}

// Collectors of two groups register side by side.
func TestLagCollectorsOfTwoGroupsShareARegistry(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	adm := kadm.NewClient(c.Client(t))
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.NewLagCollector(adm, "a")); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(metrics.NewLagCollector(adm, "b")); err != nil {
		t.Fatalf("second group: %v", err)
	}
	if err := reg.Register(metrics.NewLagCollector(adm, "b")); err == nil {
		t.Error("a second collector of the same group registered")
	}
}

// With LagTopics, a group no worker has joined yet reports every record in
// the log as its lag, so an autoscaler can start the first worker; a
// partition the group has started on keeps the broker's figure.
func TestLagTopicsCountsUnstartedPartitions(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 2)
	group := kafkatest.Name(t, "g")
	recs := make([]*kgo.Record, 7)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "job-%d", i)}
	}
	c.Produce(t, recs...)
	adm := kadm.NewClient(c.Client(t))
	missing := kafkatest.Name(t, "t")

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagTopics(topic), metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	mfs := waitLagTotal(t, reg, group, topic, 7)
	p0 := value(t, mfs, "shareq_share_group_lag", "group", group, "topic", topic, "partition", "0")
	p1 := value(t, mfs, "shareq_share_group_lag", "group", group, "topic", topic, "partition", "1")
	if p0+p1 != 7 {
		t.Errorf("lag per partition %v and %v, want 7 in all", p0, p1)
	}
	if s := series(mfs, "shareq_share_group_start_offset", "group", group); s != nil {
		t.Errorf("a start offset series for a group that has not started: %v", s)
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", group); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}

	// A topic that does not exist is a scrape error, and the others
	// are still exported.
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagTopics(topic, missing), metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	mfs = waitLagTotal(t, reg2, group, topic, 7)
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", group); got == 0 {
		t.Errorf("no scrape error for the missing topic %s", missing)
	}

	// A group that started: the broker's lag, not the log's.
	b := setupLag(t, 1, 10, 4)
	reg3 := prometheus.NewRegistry()
	reg3.MustRegister(metrics.NewLagCollector(b.adm, b.group, metrics.LagTopics(b.topic), metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	waitLagTotal(t, reg3, b.group, b.topic, 6)
}

// A group whose member joined but never fetched has partitions the broker
// keeps no start offset for (Apache Kafka lists them with start offset and
// lag -1, kfake not at all). Their lag is unknown: no series and no total,
// never 0. With LagTopics the log's records are counted instead.
func TestLagOfPartitionsNotStartedIsNeverZero(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 3), c.Group(t)
	recs := make([]*kgo.Record, 9)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "job-%d", i)}
	}
	c.Produce(t, recs...)
	c.JoinWithoutFetching(t, group, 3, topic)
	adm := kadm.NewClient(c.Client(t))

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	mfs := scrape(t, reg)
	for _, name := range []string{"shareq_share_group_lag", "shareq_share_group_lag_total", "shareq_share_group_start_offset"} {
		if s := series(mfs, name, "group", group); s != nil {
			t.Errorf("%s of a group not started: %v, want no series", name, s)
		}
	}
	if got := value(t, mfs, "shareq_lag_scrape_errors_total", "group", group); got != 0 {
		t.Errorf("scrape errors = %v, want 0", got)
	}

	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagTopics(topic), metrics.LagMinInterval(0), metrics.LagLogger(quietLogger())))
	waitLagTotal(t, reg2, group, topic, 9)
}
