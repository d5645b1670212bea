package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
)

// listJSON runs "shareq dlq list -json args..." and decodes its output.
func listJSON(t *testing.T, args ...string) []jsonParked {
	t.Helper()
	out, errOut, err := dlqRun(t, append([]string{"list", "-json"}, args...)...)
	if err != nil {
		t.Fatalf("list -json %v: %v\n%s", args, err, errOut)
	}
	var got []jsonParked
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("list -json %v is not a JSON array: %v\n%s", args, err, out)
	}
	return got
}

// -job finds one parked job among many by its job ID, in a table and in
// JSON, and replays it alone.
func TestDLQFindByJobID(t *testing.T) {
	t.Parallel()
	_, brokers := dlqCluster(t, 12)

	out, errOut, err := dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-job", "job-7")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, "job-7") || !strings.Contains(errOut, "1 parked jobs") {
		t.Fatalf("list -job job-7: %v\n%s%s", err, out, errOut)
	}
	got := listJSON(t, "jobs.dlq", "-brokers", brokers, "-job", "job-11")
	if len(got) != 1 || got[0].JobID != "job-11" || got[0].Offset != 11 || got[0].Value != "payload 11" {
		t.Fatalf("list -json -job job-11: %+v", got)
	}
	// The source record's location finds it too.
	if got := listJSON(t, "jobs.dlq", "-brokers", brokers, "-job", "jobs/0/3"); len(got) != 1 || got[0].JobID != "job-3" {
		t.Fatalf("list -json -job jobs/0/3: %+v", got)
	}
	_, errOut, err = dlqRun(t, "list", "jobs.dlq", "-brokers", brokers, "-job", "job-70")
	if err != nil || !strings.Contains(errOut, "no parked jobs match") {
		t.Fatalf("list -job job-70: %v\n%s", err, errOut)
	}

	out, errOut, err = dlqRun(t, "replay", "jobs.dlq", "-brokers", brokers, "-rate", "0", "-job", "job-7")
	if err != nil || !strings.Contains(out, "replayed 1 of 12 read (11 filtered out") || !strings.Contains(out, "job job-7 ") {
		t.Fatalf("replay -job job-7: %v\n%s%s", err, out, errOut)
	}
}

// -job finds a record the broker dead-lettered, which has no headers, by
// the job ID of its source record, and by its source location once that
// record is gone.
func TestDLQFindBrokerRecordByJobID(t *testing.T) {
	t.Parallel()
	c, cl := fakeTopics(t, "src", "dlq.g")
	ctx := context.Background()
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	// The broker's record of the job at src/0/off (KIP-1191): its
	// headers only, the job's key and value copied.
	dead := func(off int64, key, value []byte) *kgo.Record {
		return &kgo.Record{Topic: "dlq.g", Key: key, Value: value, Headers: []kgo.RecordHeader{
			h(dlq.BrokerHeaderTopic, "src"), h(dlq.BrokerHeaderPartition, "0"), h(dlq.BrokerHeaderOffset, strconv.FormatInt(off, 10)),
			h(dlq.BrokerHeaderGroup, "g"), h(dlq.BrokerHeaderDeliveryCount, "1"), h(dlq.BrokerHeaderMessage, dlq.BrokerMessageRejected),
		}}
	}
	for i := range 10 {
		job := &kgo.Record{Topic: "src", Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i),
			Headers: []kgo.RecordHeader{h(handler.JobIDHeader, fmt.Sprintf("bid-%d", i))}}
		if err := cl.ProduceSync(ctx, job, dead(int64(i), job.Key, job.Value)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, dead(40, []byte("gone"), []byte("gone"))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	brokers := strings.Join(c.ListenAddrs(), ",")

	out, errOut, err := dlqRun(t, "list", "dlq.g", "-brokers", brokers, "-job", "bid-6")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, "bid-6") || !strings.Contains(out, "src/0/6") {
		t.Fatalf("list -job bid-6: %v\n%s%s", err, out, errOut)
	}
	got := listJSON(t, "dlq.g", "-brokers", brokers, "-job", "bid-6")
	if len(got) != 1 || got[0].JobID != "bid-6" || !got[0].Broker || !got[0].Restored || got[0].Value != "v-6" {
		t.Fatalf("list -json -job bid-6: %+v", got)
	}
	got = listJSON(t, "dlq.g", "-brokers", brokers, "-job", "src/0/40")
	if len(got) != 1 || !got[0].JobIDUnknown || got[0].SourceOffset != 40 {
		t.Fatalf("list -json -job src/0/40 (source gone): %+v", got)
	}
}

// A replay spreads a backlog of keyless jobs over the source topic's
// partitions.
func TestDLQReplaySpreads(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "jobs"), kfake.SeedTopics(1, "jobs.dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	park, err := dlq.Middleware(cl, dlq.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		job := &handler.Job{Topic: "jobs", Offset: int64(i), Value: fmt.Appendf(nil, "payload %d", i), DeliveryCount: 1, DeliveryLimit: 5}
		if _, parked := handler.ParkedOf(handler.Chain(handler.Func(func(context.Context, *handler.Job) error { return handler.Permanent(errors.New("nope")) }), park).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
	}
	out, errOut, err := dlqRun(t, "replay", "jobs.dlq", "-brokers", strings.Join(c.ListenAddrs(), ","), "-rate", "0")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut)
	}
	per := map[string]int{}
	for _, m := range regexp.MustCompile(` -> jobs/(\d+)/\d+ `).FindAllStringSubmatch(out, -1) {
		per[m[1]]++
	}
	for p := range 6 {
		if n := per[strconv.Itoa(p)]; n < 6 || n > 7 {
			t.Errorf("partition %d got %d of 40 replayed jobs, want 6 or 7: %v", p, n, per)
		}
	}
}
