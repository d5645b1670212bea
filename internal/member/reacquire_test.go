package member

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
)

// A record the broker gives again to the session that holds its queued
// terminal ack (its lock ran out before the ack went) is not delivered
// again: the queued ack answers for the new acquisition, so the job does
// not run twice only for its second ack to be refused. Drives acquire and
// the mailbox directly; the response is a real one's records.
func TestReacquiredRecordWithAckQueuedIsNotDeliveredAgain(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	var recs []*kgo.Record
	for i := range 3 {
		recs = append(recs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i)})
	}
	c.ProduceBatch(t, recs...)
	raw := fetchRaw(t, c, topic)

	m, err := New(Config{Client: c.Client(t), Group: "g", Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	p := tp{topic, 0}
	s := m.session(0)
	s.epoch = 1
	fetched := func(count int16) *kmsg.ShareFetchResponseTopicPartition {
		return &kmsg.ShareFetchResponseTopicPartition{
			Partition: 0,
			Records:   raw,
			AcquiredRecords: []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{
				{FirstOffset: 0, LastOffset: 2, DeliveryCount: count},
			},
		}
	}
	rq := &request{s: s, kind: kindFetch, sent: time.Now()}
	if n := m.acquire(rq, p, fetched(1), 5*time.Second); n != 3 || len(m.out.Deliveries) != 3 {
		t.Fatalf("first fetch: %d acquired, %d delivered, want 3 and 3", n, len(m.out.Deliveries))
	}
	m.out = Event{}
	// Offset 1's job ends; its accept is queued behind the session's
	// request in flight when the broker gives all three again.
	k1 := Key{topic, 0, 1}
	m.mbox.acks, m.mbox.anything = append(m.mbox.acks, pendingAck{k1, Accept}), true
	m.mailbox()
	if h := m.held.Get(k1); h == nil || h.ack != int8(Accept) || h.queued != opAck {
		t.Fatalf("set-up: offset 1 = %+v, want its accept queued", m.held.Get(k1))
	}
	rq = &request{s: s, kind: kindFetch, sent: time.Now()}
	if n := m.acquire(rq, p, fetched(2), 5*time.Second); n != 3 {
		t.Fatalf("second fetch: %d acquired, want 3", n)
	}
	var got []int64
	for _, d := range m.out.Deliveries {
		got = append(got, d.Record.Offset)
		if d.Count != 2 {
			t.Errorf("offset %d delivered with count %d, want 2", d.Record.Offset, d.Count)
		}
	}
	if fmt.Sprint(got) != "[0 2]" {
		t.Errorf("second fetch delivered offsets %v, want [0 2] (1 has its accept queued)", got)
	}
	h := m.held.Get(k1)
	if h.ack != int8(Accept) || h.queued != opAck || h.d.Count != 2 || h.d.Record != nil {
		t.Errorf("offset 1 after the second fetch = %+v, want its accept still queued, count 2, no record kept", h)
	}
	if m.st.Reacquired != 1 || m.nHeld != 3 || m.nAcked != 1 {
		t.Errorf("Reacquired %d, held %d, acked %d; want 1, 3, 1", m.st.Reacquired, m.nHeld, m.nAcked)
	}
	if want := recordBytes(m.held.Get(Key{topic, 0, 0}).d.Record) + recordBytes(m.held.Get(Key{topic, 0, 2}).d.Record); m.bytes != want {
		t.Errorf("bytes in hand %d, want %d (offsets 0 and 2 only)", m.bytes, want)
	}
}
