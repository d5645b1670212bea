package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
)

// cli runs "shareq args..." and returns stdout, stderr and the error.
func cli(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// statusOf returns the -json status of group, failing the test on error.
func statusOf(t *testing.T, brokers, group string) status {
	t.Helper()
	out, errOut, err := cli(t, "status", "-json", "-brokers", brokers, group)
	if err != nil {
		t.Fatalf("status %s: %v\n%s", group, err, errOut)
	}
	var st status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -json is not a status: %v\n%s", err, out)
	}
	return st
}

// waitStatus polls the status of group until ok accepts it, and returns
// the last status seen (failing the test after a while).
func waitStatus(t *testing.T, brokers, group, what string, ok func(status) bool) status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := statusOf(t, brokers, group)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			j, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("waiting for %s; last status:\n%s", what, j)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func partitionOf(st status, topic string, p int32) (partitionStatus, bool) {
	for _, ps := range st.Partitions {
		if ps.Topic == topic && ps.Partition == p {
			return ps, true
		}
	}
	return partitionStatus{}, false
}

func eq(p *int64, want int64) bool { return p != nil && *p == want }

// startOffsetOK reports whether a reported start offset fits want, the
// offset before which every record is done. Apache Kafka reports the start
// offset last written to the share-group state, which trails the records
// already done until the broker next writes that partition's state (its
// lag is exact); kfake reports the current one.
func startOffsetOK(c *kafkatest.Cluster, got *int64, want int64) bool {
	if c.Kind == "kfake" {
		return eq(got, want)
	}
	return got != nil && *got >= 0 && *got <= want
}

// pollAccept polls cl once (for up to 10 s) and accepts what it returns.
func pollAccept(t *testing.T, cl *kgo.Client) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := cl.PollFetches(ctx)
	fs.EachError(func(topic string, p int32, err error) {
		if ctx.Err() == nil {
			t.Logf("poll %s/%d: %v", topic, p, err)
		}
	})
	recs := fs.Records()
	for _, r := range recs {
		r.Ack(kgo.AckAccept)
	}
	if err := cl.FlushAcks(context.Background()); err != nil {
		t.Fatalf("flush acks: %v", err)
	}
	return recs
}

func TestStatusLiveMemberLag(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 2), c.Group(t)
	brokers := strings.Join(c.Seeds, ",")

	// 5 records in partition 0, 3 in partition 1.
	producer := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 8 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(min(i/5, 1)), Value: fmt.Appendf(nil, "job %d", i)})
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// A member accepts the first batch it gets (at most 3 records), and
	// then holds the next batch without acknowledging it.
	member := c.ShareConsumer(t, group, []string{topic}, kgo.ClientID("status-test-member"),
		kgo.ShareMaxRecords(3), kgo.ShareMaxRecordsStrict())
	var accepted []*kgo.Record
	for len(accepted) == 0 {
		accepted = pollAccept(t, member)
	}
	done := map[int32]int64{}
	for _, r := range accepted {
		done[r.Partition]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	held := member.PollFetches(ctx).Records() // in flight: counted in the lag
	cancel()
	t.Logf("accepted %d records %v, holding %d", len(accepted), done, len(held))

	// Records are acquired in offset order, so the accepted ones are the
	// first done[p] records of partition p.
	produced := map[int32]int64{0: 5, 1: 3}
	st := waitStatus(t, brokers, group, "the member and the accepted records", func(st status) bool {
		if len(st.Members) != 1 || len(st.Members[0].Assigned) == 0 {
			return false
		}
		for p, n := range done {
			if ps, ok := partitionOf(st, topic, p); !ok || !startOffsetOK(c, ps.StartOffset, n) || !eq(ps.Lag, produced[p]-n) {
				return false
			}
		}
		return true
	})
	if st.State != "Stable" || st.Group != group {
		t.Errorf("group %q state %q, want %q Stable", st.Group, st.State, group)
	}
	m := st.Members[0]
	if m.ClientID != "status-test-member" || m.MemberID == "" || m.Host == "" || m.Epoch < 1 || m.State != "joined" {
		t.Errorf("member = %+v, want client ID, member ID, host, an epoch and state joined", m)
	}
	if len(m.Assigned) != 1 || m.Assigned[0].Topic != topic || !slices.Equal(m.Assigned[0].Partitions, []int32{0, 1}) {
		t.Errorf("member assigned %+v, want %s partitions [0 1]", m.Assigned, topic)
	}
	var total, waiting int64
	for p, n := range produced {
		ps, ok := partitionOf(st, topic, p)
		if !ok {
			t.Errorf("partition %d missing", p)
			continue
		}
		if !eq(ps.HighWatermark, n) {
			t.Errorf("partition %d high watermark %s, want %d", p, optInt(ps.HighWatermark), n)
		}
		if ps.StartOffset == nil {
			// The group has not fetched from it (or, on Kafka, has not
			// written its state yet): lag unknown, and with earliest its
			// whole log waits.
			if ps.Lag != nil || !eq(ps.LogStartOffset, 0) || !eq(ps.Waiting, n) {
				t.Errorf("partition %d without a start offset: lag %s, log start %s, waiting %s; want unknown, 0, %d",
					p, optInt(ps.Lag), optInt(ps.LogStartOffset), optInt(ps.Waiting), n)
			}
			waiting += n
			continue
		}
		if !startOffsetOK(c, ps.StartOffset, done[p]) || !eq(ps.Lag, n-done[p]) {
			t.Errorf("partition %d: start offset %s lag %s, want %d and %d", p, optInt(ps.StartOffset), optInt(ps.Lag), done[p], n-done[p])
		}
		if ps.LogStartOffset != nil || ps.Waiting != nil {
			t.Errorf("partition %d with a start offset: log start %s, waiting %s; want neither", p, optInt(ps.LogStartOffset), optInt(ps.Waiting))
		}
		total += *ps.Lag
	}
	wantTotal := fmt.Sprint(total)
	if waiting == 0 && !eq(st.TotalLag, total) || waiting > 0 && st.TotalLag != nil || st.LagAtLeast != total+waiting {
		t.Errorf("total lag %s, at least %d; want %d known and %d waiting", optInt(st.TotalLag), st.LagAtLeast, total, waiting)
	}
	if waiting > 0 {
		wantTotal = fmt.Sprintf("≥ %d", total+waiting)
	}

	// The table shows the same.
	out, _, err := cli(t, "status", group, "-brokers", brokers)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^state\s+Stable$`),
		regexp.MustCompile(`(?m)^members\s+1$`),
		regexp.MustCompile(`(?m)^total lag\s+` + wantTotal + `$`),
		regexp.MustCompile(`(?m)^MEMBER ID\s+CLIENT ID\s+HOST\s+STATE\s+ASSIGNED$`),
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m.MemberID) + `\s+status-test-member\s+\S+\s+joined\s+` + regexp.QuoteMeta(topic) + `:0,1$`),
		regexp.MustCompile(`(?m)^TOPIC\s+PARTITION\s+START OFFSET\s+LAG\s+HIGH WATERMARK(\s+IN LOG)?$`),
		// Partition 0 may not have a start offset yet when the member has
		// fetched only from partition 1 (or, on Kafka, when its state was
		// not written yet): "-" for both columns then, and its 5 records
		// in the log.
		regexp.MustCompile(fmt.Sprintf(`(?m)^%s\s+0\s+((%s)\s+%d\s+5(\s+-)?|-\s+-\s+5\s+5)$`, regexp.QuoteMeta(topic), startPattern(c, done[0]), 5-done[0])),
	} {
		if !want.MatchString(out) {
			t.Errorf("status output does not match %s:\n%s", want, out)
		}
	}
}

// startPattern matches the START OFFSET cell of a partition whose first
// done records are done (see startOffsetOK).
func startPattern(c *kafkatest.Cluster, done int64) string {
	if c.Kind == "kfake" {
		return fmt.Sprint(done)
	}
	alts := []string{"-"}
	for i := range done + 1 {
		alts = append(alts, fmt.Sprint(i))
	}
	return strings.Join(alts, "|")
}

func TestStatusJSONShape(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	brokers := strings.Join(c.Seeds, ",")
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("a")}, &kgo.Record{Topic: topic, Value: []byte("b")})
	member := c.ShareConsumer(t, group, []string{topic}, kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict())
	for len(pollAccept(t, member)) == 0 {
	}
	waitStatus(t, brokers, group, "a member and a start offset", func(st status) bool {
		ps, ok := partitionOf(st, topic, 0)
		return len(st.Members) == 1 && ok && eq(ps.Lag, 1)
	})

	out, _, err := cli(t, "status", "-brokers", brokers, "-json", group)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	if got, want := keys(doc), []string{"coordinator", "group", "group_epoch", "lag_at_least", "members", "partitions", "partitions_without_start_offset", "records_in_log_not_started", "state", "total_lag"}; !slices.Equal(got, want) {
		t.Errorf("top-level keys %v, want %v", got, want)
	}
	members := doc["members"].([]any)
	if len(members) != 1 {
		t.Fatalf("members: %v", members)
	}
	mem := members[0].(map[string]any)
	if got, want := keys(mem), []string{"assigned", "client_id", "host", "member_epoch", "member_id", "state"}; !slices.Equal(got, want) {
		t.Errorf("member keys %v, want %v", got, want)
	}
	as := mem["assigned"].([]any)[0].(map[string]any)
	if as["topic"] != topic || fmt.Sprint(as["partitions"]) != "[0]" {
		t.Errorf("assigned = %v", as)
	}
	parts := doc["partitions"].([]any)
	if len(parts) != 1 {
		t.Fatalf("partitions: %v", parts)
	}
	p := parts[0].(map[string]any)
	if got, want := keys(p), []string{"high_watermark", "lag", "partition", "start_offset", "topic"}; !slices.Equal(got, want) {
		t.Errorf("partition keys %v, want %v", got, want)
	}
	start, _ := p["start_offset"].(float64)
	if p["topic"] != topic || p["partition"] != 0.0 || !startOffsetOK(c, ptr(int64(start)), 1) || p["lag"] != 1.0 || p["high_watermark"] != 2.0 || doc["total_lag"] != 1.0 || doc["lag_at_least"] != 1.0 || doc["partitions_without_start_offset"] != 0.0 {
		t.Errorf("partition %v, total lag %v; want start 1, lag 1, high watermark 2, total lag 1", p, doc["total_lag"])
	}
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	brokers := strings.Join(c.Seeds, ",")

	missing := kafkatest.Name(t, "g")
	_, _, err := cli(t, "status", "-brokers", brokers, missing)
	if err == nil || err.Error() != "share group "+missing+" not found" {
		t.Errorf("status of a missing group: %v", err)
	}

	consumer := consumerGroup(t, c)
	_, _, err = cli(t, "status", "-brokers", brokers, consumer)
	if err == nil || err.Error() != consumer+" is a consumer group, not a share group" {
		t.Errorf("status of a consumer group: %v", err)
	}

	_, _, err = cli(t, "status", "-brokers", "127.0.0.1:1", "g")
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach brokers 127.0.0.1:1: ") {
		t.Errorf("status with a wrong broker address: %v", err)
	}

	_, errOut, err := cli(t, "status", "-brokers", brokers)
	if err != errUsage || !strings.Contains(errOut, "usage: shareq status GROUP") {
		t.Errorf("status without a group: %v\n%s", err, errOut)
	}
	_, errOut, err = cli(t, "status", "-h")
	if err == nil || !strings.Contains(errOut, "HIGH WATERMARK  the partition's end") || !strings.Contains(errOut, "-json") {
		t.Errorf("status -h: %v\n%s", err, errOut)
	}
}

// consumerGroup makes a consumer group (not a share group) that has
// committed an offset, and returns its name.
func consumerGroup(t *testing.T, c *kafkatest.Cluster) string {
	t.Helper()
	topic := c.Topic(t, 1)
	c.Produce(t, &kgo.Record{Topic: topic, Value: []byte("x")})
	name := kafkatest.Name(t, "cg")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Seeds...), kgo.ConsumerGroup(name), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for n := 0; n == 0 && ctx.Err() == nil; {
		n = len(cl.PollFetches(ctx).Records())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = c.Admin().DeleteGroup(ctx, name)
	})
	return name
}
func ptr[T any](v T) *T { return &v }

// produce50 writes 50 records to each of the topic's partitions.
func produce50(t *testing.T, c *kafkatest.Cluster, topic string, partitions int) {
	t.Helper()
	producer := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range partitions {
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(p), Value: fmt.Appendf(nil, "job %d/%d", p, i)})
		}
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// The state of issue 29 item 4: 300 jobs wait on 6 partitions of a group
// whose member joined but never fetched, so the broker has no start
// offset for any of them. The lag is unknown, never 0: the total says
// what is known, and the records in the logs are shown with what the
// group's share.auto.offset.reset makes of them.
func TestStatusNotStarted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reset     string
		total     string  // the total lag line
		atLeast   float64 // lag_at_least
		waiting   bool    // whether partitions have "waiting"
		notStated string  // in the "not started" line
	}{
		{"earliest", "≥ 300", 300, true, "300 records in their logs, all waiting for the group (share.auto.offset.reset=earliest)"},
		{"latest", "unknown", 0, false, "300 records in their logs, not delivered unless the group fetched from them already (share.auto.offset.reset=latest: a first fetch starts at the end of the log)"},
	} {
		t.Run(tc.reset, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.New(t)
			topic := c.Topic(t, 6)
			group := c.GroupWith(t, map[string]string{"share.auto.offset.reset": tc.reset})
			brokers := strings.Join(c.Seeds, ",")
			produce50(t, c, topic, 6)
			c.JoinWithoutFetching(t, group, 6, topic)

			out, errOut, err := cli(t, "status", "-json", "-brokers", brokers, group)
			if err != nil {
				t.Fatalf("status: %v\n%s", err, errOut)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if doc["total_lag"] != nil || doc["lag_at_least"] != tc.atLeast || doc["partitions_without_start_offset"] != 6.0 ||
				doc["records_in_log_not_started"] != 300.0 || doc["auto_offset_reset"] != tc.reset {
				t.Errorf("total_lag %v, lag_at_least %v, partitions_without_start_offset %v, records_in_log_not_started %v, auto_offset_reset %v; want null, %v, 6, 300, %s\n%s",
					doc["total_lag"], doc["lag_at_least"], doc["partitions_without_start_offset"], doc["records_in_log_not_started"], doc["auto_offset_reset"], tc.atLeast, tc.reset, out)
			}
			parts, _ := doc["partitions"].([]any)
			if len(parts) != 6 {
				t.Fatalf("%d partitions, want 6:\n%s", len(parts), out)
			}
			for _, p := range parts {
				p := p.(map[string]any)
				lag, hasLag := p["lag"]
				waiting, hasWaiting := p["waiting"]
				if !hasLag || lag != nil || p["start_offset"] != nil || p["high_watermark"] != 50.0 || p["log_start_offset"] != 0.0 ||
					hasWaiting != tc.waiting || tc.waiting && waiting != 50.0 {
					t.Errorf("partition %v: want lag and start offset null, high watermark 50, log start 0, waiting %v", p, tc.waiting)
				}
			}

			out, _, err = cli(t, "status", "-brokers", brokers, group)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`(?m)^total lag\s+` + regexp.QuoteMeta(tc.total) + `$`),
				regexp.MustCompile(`(?m)^not started\s+6 of 6 partitions have no start offset yet \(the group has not fetched from them, or the broker has not written their state yet\), so their lag is unknown; ` + regexp.QuoteMeta(tc.notStated) + `$`),
				regexp.MustCompile(`(?m)^TOPIC\s+PARTITION\s+START OFFSET\s+LAG\s+HIGH WATERMARK\s+IN LOG$`),
				regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + `\s+5\s+-\s+-\s+50\s+50$`),
			} {
				if !want.MatchString(out) {
					t.Errorf("status output does not match %s:\n%s", want, out)
				}
			}
			if regexp.MustCompile(`(?m)^total lag\s+0`).MatchString(out) {
				t.Errorf("a total lag of 0 with 300 records waiting:\n%s", out)
			}
		})
	}
}
