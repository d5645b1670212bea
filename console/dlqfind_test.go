package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

var jobIDCell = regexp.MustCompile(`<code class="id">([^<]*)</code>`)

// shownIDs returns the job IDs a DLQ page lists.
func shownIDs(body string) []string {
	var ids []string
	for _, m := range jobIDCell.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// The DLQ page's job ID filter finds one job among many, by its job ID
// or its source record, and a replay of the filter replays it alone.
func TestDLQPageFindsJobByID(t *testing.T) {
	t.Parallel()
	b := setupDLQ(t, 2, console.Actions(), console.ReplayRate(0))
	b.park(t, 0, 20)
	page := "/dlq/" + b.dlq

	code, body := b.get(t, page+"?id=job-13")
	if got := shownIDs(body); code != http.StatusOK || len(got) != 1 || got[0] != "job-13" {
		t.Fatalf("?id=job-13: %d, jobs %v, want job-13 alone\n%s", code, got, body)
	}
	mustContain(t, "filter form", body, `name="id" value="job-13"`, `<input type="hidden" name="id" value="job-13">`, "clear")
	_, body = b.get(t, page+"?id="+url.QueryEscape(b.topic+"/0/1005"))
	if got := shownIDs(body); len(got) != 1 || got[0] != "job-5" {
		t.Errorf("?id=%s/0/1005: jobs %v, want job-5", b.topic, got)
	}
	_, body = b.get(t, page+"?id=job-99")
	mustContain(t, "unknown job ID", body, "No parked jobs match the filter")

	end := b.endOffset(t, b.topic)
	_, body = b.post(t, page+"?id=job-13", page+"/replay", url.Values{"mode": {"filter"}, "id": {"job-13"}})
	mustContain(t, "replay of the filter", body, "<strong>1 replayed</strong>", "job-13")
	if got := b.jobIDs(t, b.topic, end, 1); got[0] != "job-13" {
		t.Errorf("replayed %v, want job-13", got)
	}
}

// A share group's broker dead-letter topic: a record, which has no
// headers, is found by the job ID of its source record, or by its source
// location once that record is gone.
func TestDLQPageFindsBrokerRecordByID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dlqTopic := "dlq." + kafkatest.Name(t, "g")
	b.c.CreateTopic(t, dlqTopic, 1)
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	// The broker's record of the job at b.topic/0/off (KIP-1191): its
	// headers only, the job's key and value copied.
	dead := func(off int64, key, value []byte) *kgo.Record {
		return &kgo.Record{Topic: dlqTopic, Key: key, Value: value, Headers: []kgo.RecordHeader{
			h(dlq.BrokerHeaderTopic, b.topic), h(dlq.BrokerHeaderPartition, "0"), h(dlq.BrokerHeaderOffset, strconv.FormatInt(off, 10)),
			h(dlq.BrokerHeaderGroup, b.group), h(dlq.BrokerHeaderDeliveryCount, "1"), h(dlq.BrokerHeaderMessage, dlq.BrokerMessageRejected),
		}}
	}
	var recs []*kgo.Record
	for i := range 10 {
		job := &kgo.Record{Topic: b.topic, Key: fmt.Appendf(nil, "k-%d", i), Value: fmt.Appendf(nil, "v-%d", i),
			Headers: []kgo.RecordHeader{h(handler.JobIDHeader, fmt.Sprintf("bid-%d", i))}}
		b.c.Produce(t, job)
		recs = append(recs, dead(int64(i), job.Key, job.Value))
	}
	b.c.Produce(t, append(recs, dead(40, []byte("gone"), []byte("gone")))...)

	page := "/dlq/" + dlqTopic
	_, body := b.get(t, page+"?id=bid-4")
	if got := shownIDs(body); len(got) != 1 || got[0] != "bid-4" {
		t.Fatalf("?id=bid-4: jobs %v, want bid-4\n%s", got, body)
	}
	mustContain(t, "broker record", body, "<small>broker</small>", b.topic+"/0/4")
	_, body = b.get(t, page+"?id="+url.QueryEscape(b.topic+"/0/40"))
	if got := shownIDs(body); len(got) != 1 {
		t.Errorf("?id=%s/0/40 (source gone): jobs %v, want one", b.topic, got)
	}
}

// The replays of a selection, one per job, spread the jobs over the
// source topic's partitions, as enqueue spreads a burst.
func TestReplaySelectionSpreads(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Actions(), console.ReplayRate(0))
	topic := b.c.Topic(t, 6)
	dlqTopic := topic + dlq.TopicSuffix
	b.c.CreateTopic(t, dlqTopic, 1)
	mw, err := dlq.Middleware(b.cl, dlq.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"mode": {"jobs"}}
	for i := range 12 {
		job := &handler.Job{Topic: topic, Offset: int64(i), Value: []byte(`{}`), Timestamp: time.Now(), DeliveryCount: 1, DeliveryLimit: 5}
		if _, parked := handler.ParkedOf(handler.Chain(handler.Func(func(context.Context, *handler.Job) error { return handler.Permanent(errors.New("nope")) }), mw).Handle(context.Background(), job)); !parked {
			t.Fatalf("job %d not parked", i)
		}
		form.Add("job", fmt.Sprintf("0:%d", i))
	}
	page := "/dlq/" + dlqTopic
	_, body := b.post(t, page, page+"/replay", form)
	mustContain(t, "replay of 12 selected", body, "<strong>12 replayed</strong> of 12 selected")
	ends, err := b.c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 2 {
			t.Errorf("partition %d of %s got %d of the 12 replayed jobs, want 2", o.Partition, topic, o.Offset)
		}
	})
}
