package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// ErrUnknownTopic is matched (errors.Is) by the error of an enqueue to a
// topic the cluster does not have. shareq does not create topics: create
// it first (kadm's CreateTopic, your deployment's topic manifests, or
// "shareq dev -topics" locally).
var ErrUnknownTopic = errors.New("enqueue: the topic does not exist; create it before enqueueing to it")

// ErrTooLarge is matched (errors.Is) by the error of a job whose record
// is larger than the topic's max.message.bytes, the broker's
// message.max.bytes or the client's ProducerBatchMaxBytes, and, in
// enqueue/pgoutbox, larger than the outbox's limit.
var ErrTooLarge = errors.New("enqueue: the job is larger than the topic or producer allows")

// ErrEncode is matched (errors.Is) by the error of a job whose value
// cannot be encoded as JSON. Nothing was sent.
var ErrEncode = errors.New("enqueue: the job's value cannot be encoded as JSON")

// Producer writes records and waits for the broker to acknowledge them.
// *kgo.Client implements it; shareqtest.Recorder records what would have
// been sent. ProduceSync must be safe for concurrent use.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

var _ Producer = (*kgo.Client)(nil)

// Option sets a property of one job: its ID, key or headers.
type Option interface{ apply(*Job) }

type optionFunc func(*Job)

func (f optionFunc) apply(j *Job) { f(j) }

// ID sets the job's ID, the value of the [handler.JobIDHeader] header.
// Default: a fresh [NewID]. Reuse an ID to make a retried enqueue the same
// job to the worker's idempotency middleware.
func ID(id string) Option { return optionFunc(func(j *Job) { j.ID = id }) }

// Key sets the record key. Jobs with the same key go to the same
// partition, in enqueue order. Default: no key; with [Partitioner] the
// producer sends each keyless job to the next partition, round-robin.
func Key(key []byte) Option { return optionFunc(func(j *Job) { j.Key = key }) }

// Header adds a record header. The [handler.JobIDHeader] header is set
// from the job ID; a header of that name given here is dropped.
func Header(key string, value []byte) Option {
	return optionFunc(func(j *Job) { j.Headers = append(j.Headers, handler.Header{Key: key, Value: value}) })
}

// Headers adds record headers, in order, as many [Header] options would.
// For code that computes a job's headers, such as a propagator writing a
// trace context (the shareqotel module's Inject).
func Headers(hs ...handler.Header) Option {
	return optionFunc(func(j *Job) { j.Headers = append(j.Headers, hs...) })
}

// Raw is a job value that is already encoded: it becomes the record's
// value as it is, not JSON. Use it for handlers that read the bytes
// themselves (an image, protobuf) rather than through handler.JSON:
//
//	id, err := q.Enqueue(ctx, "images", enqueue.Raw(png), enqueue.Header("content-type", []byte("image/png")))
type Raw []byte

// Job is one job to enqueue: its topic, its value (encoded as JSON, or
// sent as it is when it is a [Raw]) and its properties. A zero ID means
// a fresh [NewID].
type Job struct {
	Topic   string
	Value   any
	ID      string
	Key     []byte
	Headers []handler.Header
}

// NewJob returns the job that enqueues v on topic with opts.
func NewJob(topic string, v any, opts ...Option) Job {
	j := Job{Topic: topic, Value: v}
	for _, o := range opts {
		o.apply(&j)
	}
	return j
}

// Record encodes the job: the record to produce, with the job ID (a fresh
// [NewID] when j.ID is empty) in the [handler.JobIDHeader] header and the
// value as JSON (a [Raw] value as it is). Its error matches [ErrEncode] for a value that JSON
// cannot encode.
func (j Job) Record() (*kgo.Record, error) {
	if j.Topic == "" {
		return nil, errors.New("enqueue: job has no topic")
	}
	var value []byte
	if raw, ok := j.Value.(Raw); ok {
		value = raw
	} else {
		var err error
		if value, err = json.Marshal(j.Value); err != nil {
			return nil, &kindError{fmt.Sprintf("enqueue: %s: ", j.Topic), ErrEncode, err}
		}
	}
	id := j.ID
	if id == "" {
		id = NewID()
	}
	hs := make([]kgo.RecordHeader, 0, len(j.Headers)+1)
	hs = append(hs, kgo.RecordHeader{Key: handler.JobIDHeader, Value: []byte(id)})
	for _, h := range j.Headers {
		if h.Key != handler.JobIDHeader {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	return &kgo.Record{Topic: j.Topic, Key: j.Key, Value: value, Headers: hs}, nil
}

// RecordID returns the job ID a record carries in its
// [handler.JobIDHeader] header, or "" when it has none.
func RecordID(r *kgo.Record) string {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == handler.JobIDHeader {
			return string(r.Headers[i].Value)
		}
	}
	return ""
}

// Client enqueues jobs through a [Producer], normally the caller's
// *kgo.Client (which the Client does not close). It is safe for concurrent
// use.
type Client struct {
	p Producer
}

// New returns a Client that produces with p. A *kgo.Client must spread
// keyless jobs over the partitions: New fails with
// [ErrStickyPartitioner] for one created without [ProducerOpts] (see
// [CheckProducer]).
func New(p Producer) (*Client, error) {
	if p == nil {
		return nil, errors.New("enqueue: nil Producer")
	}
	if err := CheckProducer(p); err != nil {
		return nil, err
	}
	return &Client{p: p}, nil
}

// Enqueue enqueues v, encoded as JSON, on topic and returns the job's ID
// once the broker has acknowledged it. See the package doc for its errors.
func (c *Client) Enqueue(ctx context.Context, topic string, v any, opts ...Option) (string, error) {
	ids, err := c.EnqueueMany(ctx, NewJob(topic, v, opts...))
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// EnqueueMany enqueues jobs and returns their IDs, in the order of jobs,
// once the broker has acknowledged every one. Every job is encoded before
// any is sent, so a value that cannot be encoded sends nothing. When the
// broker refuses some jobs, the error names the first and the others may
// have been enqueued: the IDs returned with the error are those of the
// jobs that were (empty for the ones that were not).
func (c *Client) EnqueueMany(ctx context.Context, jobs ...Job) ([]string, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	recs := make([]*kgo.Record, len(jobs))
	for i, j := range jobs {
		r, err := j.Record()
		if err != nil {
			return nil, err
		}
		recs[i] = r
	}
	res := c.p.ProduceSync(ctx, recs...)
	index := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		index[r] = i
	}
	ids := make([]string, len(recs))
	var first error
	for _, pr := range res {
		i, ok := index[pr.Record]
		if !ok {
			continue
		}
		if pr.Err != nil {
			if first == nil {
				first = ProduceError(pr.Record, pr.Err)
			}
			continue
		}
		ids[i] = RecordID(recs[i])
	}
	if first == nil && len(res) != len(recs) {
		first = fmt.Errorf("enqueue: the producer returned %d results for %d jobs", len(res), len(recs))
	}
	return ids, first
}

// ProduceError describes a failed produce of r: it wraps err, and
// [ErrUnknownTopic] or [ErrTooLarge] when err is the broker's (or the
// client's) UNKNOWN_TOPIC_OR_PARTITION or MESSAGE_TOO_LARGE. The relay of
// enqueue/pgoutbox reports its failures with it.
func ProduceError(r *kgo.Record, err error) error {
	id := RecordID(r)
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return &kindError{fmt.Sprintf("enqueue: job %s on %s: ", id, r.Topic), ErrUnknownTopic, err}
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return &kindError{fmt.Sprintf("enqueue: job %s on %s (%d bytes): ", id, r.Topic, len(r.Key)+len(r.Value)), ErrTooLarge, err}
	}
	return fmt.Errorf("enqueue: job %s on %s: %w", id, r.Topic, err)
}

// kindError is an error of a known kind (one of the package's sentinel
// errors) with its cause. Its message is prefix, the kind's message
// without its "enqueue: " (prefix already names the package), and the
// cause: "enqueue: job 1 on t: the topic does not exist…: UNKNOWN_TOPIC…".
type kindError struct {
	prefix string
	kind   error
	err    error
}

func (e *kindError) Error() string {
	return e.prefix + strings.TrimPrefix(e.kind.Error(), "enqueue: ") + ": " + e.err.Error()
}

func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
