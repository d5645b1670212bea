package enqueue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
)

type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// setup returns a cluster, a topic of one partition on it and a Client
// producing to it.
func setup(t *testing.T) (*kafkatest.Cluster, string, *enqueue.Client) {
	t.Helper()
	c := kafkatest.New(t)
	topic := c.Topic(t, 1)
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	return c, topic, q
}

// endOffset returns the end offset of partition 0 of topic.
func endOffset(t *testing.T, c *kafkatest.Cluster, topic string) int64 {
	t.Helper()
	ends, err := c.Admin().ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v", topic, o.Err)
	}
	return o.Offset
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

var uuidv7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestEnqueueProducesJSONWithJobID(t *testing.T) {
	t.Parallel()
	c, topic, q := setup(t)

	id, err := q.Enqueue(t.Context(), topic, email{To: "ada@example.com", Subject: "hi"},
		enqueue.Key([]byte("ada")), enqueue.Header("trace", []byte("t-1")))
	if err != nil {
		t.Fatal(err)
	}
	if !uuidv7.MatchString(id) {
		t.Fatalf("default job ID %q is not a UUIDv7", id)
	}
	r := c.Consume(t, topic, 1)[0]
	if got := header(r, handler.JobIDHeader); got != id {
		t.Errorf("job ID header = %q, want the returned ID %q", got, id)
	}
	if string(r.Key) != "ada" || header(r, "trace") != "t-1" {
		t.Errorf("key %q, trace header %q; want ada, t-1", r.Key, header(r, "trace"))
	}
	// The worker's handler.JSON decodes what Enqueue encoded.
	var got email
	job := &handler.Job{Value: r.Value}
	if err := handler.JSON(func(_ context.Context, _ *handler.Job, v email) error { got = v; return nil }).Handle(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	if got != (email{To: "ada@example.com", Subject: "hi"}) {
		t.Errorf("decoded %+v", got)
	}
}

func TestEnqueueWithID(t *testing.T) {
	t.Parallel()
	c, topic, q := setup(t)
	id, err := q.Enqueue(t.Context(), topic, email{To: "x"}, enqueue.ID("signup-42"),
		enqueue.Header(handler.JobIDHeader, []byte("ignored")))
	if err != nil || id != "signup-42" {
		t.Fatalf("Enqueue = %q, %v; want signup-42", id, err)
	}
	r := c.Consume(t, topic, 1)[0]
	var ids []string
	for _, h := range r.Headers {
		if h.Key == handler.JobIDHeader {
			ids = append(ids, string(h.Value))
		}
	}
	if !slices.Equal(ids, []string{"signup-42"}) {
		t.Fatalf("job ID headers = %q, want just signup-42", ids)
	}
}

// A Raw value is the record's value byte for byte, not JSON.
func TestEnqueueRawSendsTheBytesAsTheyAre(t *testing.T) {
	t.Parallel()
	c, topic, q := setup(t)
	png := []byte("\x89PNG\r\n\x1a\n not JSON")
	id, err := q.Enqueue(t.Context(), topic, enqueue.Raw(png), enqueue.Header("content-type", []byte("image/png")))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Consume(t, topic, 1)[0]
	if string(r.Value) != string(png) || header(r, handler.JobIDHeader) != id || header(r, "content-type") != "image/png" {
		t.Errorf("record value %q, job ID %q, content type %q; want the raw bytes, %q, image/png",
			r.Value, header(r, handler.JobIDHeader), header(r, "content-type"), id)
	}
}

func TestEnqueueManyReturnsIDsInOrder(t *testing.T) {
	t.Parallel()
	c, topic, q := setup(t)
	var jobs []enqueue.Job
	for i := range 20 {
		jobs = append(jobs, enqueue.NewJob(topic, map[string]int{"n": i}, enqueue.Key([]byte("same"))))
	}
	ids, err := q.EnqueueMany(t.Context(), jobs...)
	if err != nil {
		t.Fatal(err)
	}
	recs := c.Consume(t, topic, 20)
	for i, r := range recs {
		var v map[string]int
		if err := json.Unmarshal(r.Value, &v); err != nil || v["n"] != i {
			t.Fatalf("record %d: %s, %v; want n=%d (same key: enqueue order)", i, r.Value, err, i)
		}
		if got := header(r, handler.JobIDHeader); got != ids[i] {
			t.Fatalf("record %d has job ID %q, EnqueueMany returned %q for it", i, got, ids[i])
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("default IDs of one batch are not time-ordered: %q", ids)
	}
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Errorf("duplicate IDs: %q", ids)
	}
}

func TestUnencodableValueSendsNothing(t *testing.T) {
	t.Parallel()
	c, topic, q := setup(t)
	_, err := q.EnqueueMany(t.Context(),
		enqueue.NewJob(topic, email{To: "fine"}),
		enqueue.NewJob(topic, map[string]any{"f": func() {}}))
	if !errors.Is(err, enqueue.ErrEncode) {
		t.Fatalf("EnqueueMany = %v, want ErrEncode", err)
	}
	if _, err := q.Enqueue(t.Context(), topic, make(chan int)); !errors.Is(err, enqueue.ErrEncode) {
		t.Fatalf("Enqueue(chan) = %v, want ErrEncode", err)
	} else if n := strings.Count(err.Error(), "enqueue:"); n != 1 {
		t.Fatalf("error %q says \"enqueue:\" %d times, want once", err, n)
	}
	if end := endOffset(t, c, topic); end != 0 {
		t.Fatalf("end offset %d after refused jobs, want 0: nothing may be sent", end)
	}
}

func TestMissingTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	missing := kafkatest.Name(t, "missing")
	_, err = q.Enqueue(t.Context(), missing, email{To: "x"})
	if !errors.Is(err, enqueue.ErrUnknownTopic) {
		t.Fatalf("Enqueue to a missing topic = %v, want ErrUnknownTopic", err)
	}
	if !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("error %q does not name the topic and say to create it", err)
	}
	if n := strings.Count(err.Error(), "enqueue:"); n != 1 {
		t.Fatalf("error %q says \"enqueue:\" %d times, want once", err, n)
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "small")
	small := "2000"
	resp, err := c.Admin().CreateTopic(t.Context(), 1, 1, map[string]*string{"max.message.bytes": &small}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Admin().DeleteTopics(context.Background(), topic) })
	q, err := enqueue.New(c.Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	// Random hex: the producer compresses batches, so a repeated byte
	// would fit.
	raw := make([]byte, 4000)
	_, _ = rand.Read(raw)
	big := hex.EncodeToString(raw)

	// Over the topic's max.message.bytes: the broker refuses it.
	if _, err := q.Enqueue(t.Context(), topic, big); !errors.Is(err, enqueue.ErrTooLarge) {
		t.Fatalf("Enqueue over max.message.bytes = %v, want ErrTooLarge", err)
	} else if n := strings.Count(err.Error(), "enqueue:"); n != 1 {
		t.Fatalf("error %q says \"enqueue:\" %d times, want once", err, n)
	}
	// Over the client's batch limit: the client refuses it unsent.
	q2, err := enqueue.New(c.Client(t, append(enqueue.ProducerOpts(), kgo.ProducerBatchMaxBytes(1000))...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q2.Enqueue(t.Context(), topic, big); !errors.Is(err, enqueue.ErrTooLarge) {
		t.Fatalf("Enqueue over ProducerBatchMaxBytes = %v, want ErrTooLarge", err)
	}
	// A job that fits goes through.
	if _, err := q.Enqueue(t.Context(), topic, "small"); err != nil {
		t.Fatal(err)
	}
}

func TestNewIDIsTimeOrdered(t *testing.T) {
	t.Parallel()
	prev := enqueue.NewID()
	for range 1000 {
		id := enqueue.NewID()
		if !uuidv7.MatchString(id) {
			t.Fatalf("%q is not a UUIDv7", id)
		}
		if id == prev {
			t.Fatalf("NewID repeated %q", id)
		}
		prev = id
	}
}

func TestNewNilProducer(t *testing.T) {
	t.Parallel()
	if _, err := enqueue.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// Headers adds its headers in order, after those of earlier options, and
// the job ID header still wins over one of the same name.
func TestHeadersAddsInOrder(t *testing.T) {
	t.Parallel()
	j := enqueue.NewJob("t", 1, enqueue.Header("a", []byte("1")),
		enqueue.Headers(handler.Header{Key: "traceparent", Value: []byte("tp")}, handler.Header{Key: "tracestate", Value: []byte("ts")},
			handler.Header{Key: handler.JobIDHeader, Value: []byte("ignored")}),
		enqueue.ID("id-1"))
	r, err := j.Record()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range r.Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	want := []string{handler.JobIDHeader + "=id-1", "a=1", "traceparent=tp", "tracestate=ts"}
	if !slices.Equal(got, want) {
		t.Fatalf("headers = %q, want %q", got, want)
	}
}
