package shareqtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
)

// Defaults of the options of [New].
const (
	// TopicDefault is the jobs topic when [Topic] is not given.
	TopicDefault = "jobs"
	// GroupDefault is the share group when [Group] is not given.
	GroupDefault = "shareqtest"
	// PartitionsDefault is the number of partitions of each topic.
	PartitionsDefault = 1
	// DeliveryLimitDefault is the broker's delivery count limit, Kafka's
	// default: a record released on its fifth delivery is archived.
	DeliveryLimitDefault = 5
	// LockDurationDefault is how long the broker locks a delivered record.
	LockDurationDefault = 2 * time.Second
	// RunTimeoutDefault bounds [Queue.Run].
	RunTimeoutDefault = 30 * time.Second
	// RetryBackoffDefault is how long the worker of [Queue.Run] holds a
	// job after a retryable failure before it releases it for the next
	// delivery, instead of the worker package's 1, 2, 4, 8 s: a test that
	// retries a job four times takes milliseconds, not 15 s. Run's opts
	// change it with worker.RetryBackoff (a test of the backoff itself
	// passes worker.ExponentialBackoff, or nil to release at once); a
	// handler's handler.RetryAfter(d, err) is held d, as in production.
	RetryBackoffDefault = 10 * time.Millisecond
)

// produceTimeout bounds one Produce.
const produceTimeout = 10 * time.Second

// An Option configures a [Queue]. Options are applied in order by [New],
// which fails the test on an invalid one.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	topic         string
	group         string
	partitions    int
	extraTopics   []string
	deliveryLimit int
	lockDuration  time.Duration
	runTimeout    time.Duration
	dlq           bool
	dlqOpts       []dlq.Option
}

// Topic sets the topic jobs are produced to and the handler consumes.
// Default [TopicDefault].
func Topic(name string) Option { return optionFunc(func(c *config) { c.topic = name }) }

// Group sets the share group the worker joins. Default [GroupDefault].
// [New] sets the group to start at the earliest offset (group config
// share.auto.offset.reset=earliest), so that a worker of the test's own
// on it, like the worker of [Queue.Run], sees the jobs produced before
// it joined.
func Group(name string) Option { return optionFunc(func(c *config) { c.group = name }) }

// Partitions sets the number of partitions of every topic the Queue
// creates. Default [PartitionsDefault].
func Partitions(n int) Option { return optionFunc(func(c *config) { c.partitions = n }) }

// CreateTopics creates more topics at start, for handlers that produce to
// topics of their own (use [Queue.Client] to read them back).
func CreateTopics(names ...string) Option {
	return optionFunc(func(c *config) { c.extraTopics = append(c.extraTopics, names...) })
}

// DeliveryLimit sets the broker's delivery count limit (broker config
// group.share.delivery.count.limit): the number of deliveries after which
// a released record is archived. Default [DeliveryLimitDefault]; lower it
// to make retry tests shorter.
func DeliveryLimit(n int) Option { return optionFunc(func(c *config) { c.deliveryLimit = n }) }

// LockDuration sets how long the broker locks a delivered record (broker
// config group.share.record.lock.duration.ms), at least 500 ms. The worker
// renews the lock of a job that runs longer. Default [LockDurationDefault].
func LockDuration(d time.Duration) Option { return optionFunc(func(c *config) { c.lockDuration = d }) }

// RunTimeout sets how long [Queue.Run] waits for every job to have a final
// outcome before it fails the test. Default [RunTimeoutDefault].
func RunTimeout(d time.Duration) Option { return optionFunc(func(c *config) { c.runTimeout = d }) }

// DLQ creates the dead-letter topic, the jobs topic plus [dlq.TopicSuffix]
// ("jobs.dlq"), and makes [Queue.Run] wrap the handler in
// [dlq.Middleware] with opts, outermost, as a production worker would:
// permanent failures and failures on the last delivery are parked there,
// and their outcome is [Parked]. If opts name another topic (dlq.Topic,
// dlq.TopicFunc), create it with [CreateTopics]. Run passes a silent
// dlq.Logger before opts; a dlq.OnPark in opts is called as in production
// (Run learns of a park from the worker's own report, not from a hook).
func DLQ(opts ...dlq.Option) Option {
	return optionFunc(func(c *config) { c.dlq, c.dlqOpts = true, append(c.dlqOpts, opts...) })
}

// Queue is an in-process Kafka broker with a jobs topic and a share group,
// for one test. Make one with [New]. Its methods are safe for concurrent
// use, but Run runs one worker at a time.
type Queue struct {
	cfg     config
	cluster *kfake.Cluster
	client  *kgo.Client

	mu       sync.Mutex
	produced []*produced       // in order of Produce
	done     map[location]bool // final outcome in an earlier Run

	runMu     sync.Mutex
	closeOnce sync.Once
}

// produced is a job produced with Produce.
type produced struct {
	loc     location
	id      string
	key     []byte
	value   []byte
	headers []handler.Header
}

// location is where a record lives.
type location struct {
	topic     string
	partition int32
	offset    int64
}

// New starts an in-process broker with the Queue's topics and returns the
// Queue. It fails the test on an invalid option and closes the Queue when
// the test ends.
func New(t testing.TB, opts ...Option) *Queue {
	t.Helper()
	cfg := config{
		topic:         TopicDefault,
		group:         GroupDefault,
		partitions:    PartitionsDefault,
		deliveryLimit: DeliveryLimitDefault,
		lockDuration:  LockDurationDefault,
		runTimeout:    RunTimeoutDefault,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		t.Fatalf("shareqtest: %v", err)
	}
	topics := append([]string{cfg.topic}, cfg.extraTopics...)
	if cfg.dlq {
		topics = append(topics, cfg.topic+dlq.TopicSuffix)
	}
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(int32(cfg.partitions), topics...),
		kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": strconv.FormatInt(cfg.lockDuration.Milliseconds(), 10),
			"group.share.delivery.count.limit":    strconv.Itoa(cfg.deliveryLimit),
			"share.record.lock.sweep.interval.ms": "100",
			"group.share.heartbeat.interval.ms":   "100",
			"group.share.session.timeout.ms":      "3000",
		}),
	)
	if err != nil {
		t.Fatalf("shareqtest: start kfake: %v", err)
	}
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, enqueue.ProducerOpts()...)...)
	if err != nil {
		cluster.Close()
		t.Fatalf("shareqtest: client: %v", err)
	}
	q := &Queue{
		cfg: cfg, cluster: cluster, client: client,
		done: map[location]bool{},
	}
	t.Cleanup(q.Close)
	if err := q.startAtEarliest(); err != nil {
		t.Fatalf("shareqtest: %v", err)
	}
	return q
}

// startAtEarliest sets the group config share.auto.offset.reset to
// earliest (what worker.AutoOffsetReset("earliest") does at a worker's
// start), so that any worker on the Queue's group sees the jobs produced
// before it joined.
func (q *Queue) startAtEarliest() error {
	ctx, cancel := context.WithTimeout(context.Background(), produceTimeout)
	defer cancel()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = q.cfg.group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, q.client)
	if err != nil {
		return fmt.Errorf("set share.auto.offset.reset of group %q: %w", q.cfg.group, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("set share.auto.offset.reset of group %q: %w", q.cfg.group, err)
		}
	}
	return nil
}

func (c *config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(c.topic) == "" {
		bad("Topic(%q): empty topic name", c.topic)
	}
	if strings.TrimSpace(c.group) == "" {
		bad("Group(%q): empty group name", c.group)
	}
	for _, t := range c.extraTopics {
		if strings.TrimSpace(t) == "" || t == c.topic {
			bad("CreateTopics(%q): empty or the jobs topic", t)
		}
	}
	if c.partitions < 1 || c.partitions > 1000 {
		bad("Partitions(%d): must be between 1 and 1000", c.partitions)
	}
	if c.deliveryLimit < 2 || c.deliveryLimit > 10 {
		bad("DeliveryLimit(%d): must be between 2 and 10, as on Apache Kafka", c.deliveryLimit)
	}
	if c.lockDuration < 500*time.Millisecond {
		bad("LockDuration(%v): must be at least 500ms", c.lockDuration)
	}
	if c.runTimeout <= 0 {
		bad("RunTimeout(%v): must be positive", c.runTimeout)
	}
	return errors.Join(errs...)
}

// Close stops the broker and the Queue's client. New arranges for it to
// run when the test ends; calling it again does nothing.
func (q *Queue) Close() {
	q.closeOnce.Do(func() {
		q.client.Close()
		q.cluster.Close()
	})
}

// Topic returns the jobs topic.
func (q *Queue) Topic() string { return q.cfg.topic }

// Group returns the share group the worker joins.
func (q *Queue) Group() string { return q.cfg.group }

// Brokers returns the broker's address, for clients of the test's own.
func (q *Queue) Brokers() []string { return q.cluster.ListenAddrs() }

// DeliveryLimit returns the broker's delivery count limit.
func (q *Queue) DeliveryLimit() int { return q.cfg.deliveryLimit }

// Client returns the Queue's client, connected to the broker: for
// producing records that are not jobs, reading a topic back, or passing
// to middleware that produces (such as dlq.Middleware). It has
// enqueue.ProducerOpts, so enqueue.New accepts it and keyless records
// spread over the partitions. The Queue closes it; do not close it
// yourself.
func (q *Queue) Client() *kgo.Client { return q.client }

// A ProduceOption sets something on a record [Queue.Produce] writes.
type ProduceOption interface{ applyRecord(*kgo.Record) }

type produceFunc func(*kgo.Record)

func (f produceFunc) applyRecord(r *kgo.Record) { f(r) }

// JobID sets the record's [handler.JobIDHeader] header, the job's ID
// ([handler.Job.ID]). Without it, a job's ID is "topic/partition/offset".
func JobID(id string) ProduceOption {
	return produceFunc(func(r *kgo.Record) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: handler.JobIDHeader, Value: []byte(id)})
	})
}

// Key sets the record's key, as enqueue.Key does in production: bytes,
// as Kafka keys are (handler.Job's Key is []byte too).
func Key(key []byte) ProduceOption {
	return produceFunc(func(r *kgo.Record) { r.Key = key })
}

// Header adds a record header, as enqueue.Header does in production.
func Header(key string, value []byte) ProduceOption {
	return produceFunc(func(r *kgo.Record) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: key, Value: value})
	})
}

// Produce writes a job with value to the jobs topic, waits for the broker
// to acknowledge it, and returns the job's ID: the [JobID] option's, else
// "topic/partition/offset". [Queue.Run] waits for every job produced this
// way, including jobs produced while it runs. Produce fails the test if
// the write fails.
func (q *Queue) Produce(t testing.TB, value []byte, opts ...ProduceOption) string {
	t.Helper()
	rec := &kgo.Record{Topic: q.cfg.topic, Value: value}
	for _, o := range opts {
		if o != nil {
			o.applyRecord(rec)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), produceTimeout)
	defer cancel()
	if err := q.client.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("shareqtest: produce to %s: %v", q.cfg.topic, err)
	}
	p := &produced{
		loc:   location{rec.Topic, rec.Partition, rec.Offset},
		key:   rec.Key,
		value: rec.Value,
	}
	for _, h := range rec.Headers {
		p.headers = append(p.headers, handler.Header{Key: h.Key, Value: h.Value})
	}
	job := handler.Job{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Headers: p.headers}
	p.id = job.ID()
	q.mu.Lock()
	q.produced = append(q.produced, p)
	q.mu.Unlock()
	return p.id
}

// ProduceJSON writes v, encoded as JSON, as [Queue.Produce] does. It fails
// the test if v does not encode.
func (q *Queue) ProduceJSON(t testing.TB, v any, opts ...ProduceOption) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("shareqtest: encode %T as JSON: %v", v, err)
	}
	return q.Produce(t, b, opts...)
}

// pending returns the produced jobs without a final outcome from an
// earlier Run.
func (q *Queue) pending() []*produced {
	q.mu.Lock()
	defer q.mu.Unlock()
	var ps []*produced
	for _, p := range q.produced {
		if !q.done[p.loc] {
			ps = append(ps, p)
		}
	}
	return ps
}
