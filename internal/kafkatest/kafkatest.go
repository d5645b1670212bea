// Package kafkatest gives broker-facing tests one Kafka cluster to run
// against: an in-process kfake cluster by default, or the real Apache Kafka
// broker named by the SHAREQ_TEST_BROKERS environment variable. Every test
// that talks to Kafka gets its cluster from [New], so the same test runs on
// both (make test runs the suite twice).
//
// Where kfake and Apache Kafka behave differently the difference is stated
// once, as a field of [Cluster], and tests read it rather than weakening an
// assertion.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
)

// EnvBrokers names the environment variable that points tests at a real
// broker ("127.0.0.1:19092"). Unset or "kfake" means an in-process kfake
// cluster per test.
const EnvBrokers = "SHAREQ_TEST_BROKERS"

// FakeLockDuration is the record lock duration of kfake test clusters.
const FakeLockDuration = 2 * time.Second

// Cluster is the Kafka a test runs against.
type Cluster struct {
	// Kind is "kfake" or "kafka".
	Kind string
	// Seeds are the bootstrap addresses.
	Seeds []string
	// LockDuration is the broker's record lock duration.
	LockDuration time.Duration
	// DeliveryLimit is the broker's delivery count limit.
	DeliveryLimit int
	// LockSweep is how late after its deadline an expired lock may be
	// noticed: kfake sweeps expired locks on an interval, Apache Kafka
	// times each lock out on its own timer.
	LockSweep time.Duration

	// The fields below state where kfake and Apache Kafka differ; each is
	// pinned down by a test in share_behaviour_test.go and listed in
	// docs/kafka-differences.md.

	// Version is the Kafka release line the broker's features say it
	// runs ("4.2", "4.3", "4.4"; "kfake"), for logs and skips that name
	// the version a feature needs.
	Version string

	// GroupDeliveryLimitConfig: the broker knows the group config
	// share.delivery.count.limit (Apache Kafka 4.3+; kfake accepts it).
	// Kafka 4.2 rejects it with INVALID_CONFIG ("Unknown group config
	// name").
	GroupDeliveryLimitConfig bool
	// HonoursGroupDeliveryLimit: the group config
	// share.delivery.count.limit overrides the broker's delivery limit.
	// kfake accepts the config but always uses the broker's limit.
	HonoursGroupDeliveryLimit bool
	// HonoursGroupLockDuration: the group config
	// share.record.lock.duration.ms overrides the broker's lock
	// duration. kfake accepts the config but always uses the broker's.
	HonoursGroupLockDuration bool
	// RenewAckConfig: the group config share.renew.acknowledge.enable
	// exists (Apache Kafka 4.3+, default true) and a RENEW in a group
	// that sets it to false fails with INVALID_RECORD_STATE. kfake and
	// Kafka 4.2 reject the config with INVALID_CONFIG and always accept
	// RENEW.
	RenewAckConfig bool
	// BrokerDLQ: the broker writes every record a share group archives
	// to the group's dead-letter topic (group config
	// errors.deadletterqueue.topic.name; Apache Kafka 4.4+, KIP-1191).
	// kfake and Kafka before 4.4 do not know the config.
	BrokerDLQ bool
	// DescribesGroupConfigDefaults: DescribeConfigs of a group returns
	// every group config, defaults included. kfake returns only the
	// configs that were set on the group.
	DescribesGroupConfigDefaults bool
	// StaleShareStartOffset: DescribeShareGroupOffsets reports the start
	// offset a share partition had before its latest share-state write
	// (Kafka persists the start offset with each write, then moves it),
	// so after the last ack it can trail the real start offset; the lag
	// is exact. kfake reports the current start offset.
	StaleShareStartOffset bool
	// ThrottlesRedelivery: records already delivered ceil(limit/2) times
	// come in batches halved for each delivery past that, and a record
	// on its last delivery comes alone (Apache Kafka's delivery
	// throttling). kfake delivers them like any other records.
	ThrottlesRedelivery bool

	// The fields below are share-protocol differences, pinned with raw
	// ShareFetch / ShareAcknowledge requests by protocol_test.go.

	// OverlapAckInvalidRecordState: two acknowledgement batches of one
	// partition in one request that overlap fail that partition with
	// INVALID_RECORD_STATE. kfake answers INVALID_REQUEST, as for
	// batches out of order on both.
	OverlapAckInvalidRecordState bool
	// RejectsRenewInFetch: a RENEW acknowledgement in a ShareFetch
	// without IsRenewAck fails the partition's acknowledgements with
	// INVALID_REQUEST. kfake reports no error. (A ShareFetch with
	// IsRenewAck and any fetch parameter fails whole with
	// INVALID_REQUEST on both.)
	RejectsRenewInFetch bool
	// LeaveKeepsRecords: a member that leaves the group (heartbeat with
	// member epoch -1) keeps the records it holds while its share
	// session is open, and can still acknowledge them. kfake releases
	// them and closes the member's share sessions when it leaves
	// (acknowledgements then fail with SHARE_SESSION_NOT_FOUND).
	LeaveKeepsRecords bool
	// FencedMemberKeepsRecords: a member removed for missing heartbeats
	// keeps its records and its share session: it can still fetch and
	// acknowledge. kfake releases its records at the session timeout.
	FencedMemberKeepsRecords bool
	// HonoursGroupSessionTimeout: the group configs
	// share.session.timeout.ms and share.heartbeat.interval.ms decide
	// when a silent member is fenced and how often members heartbeat.
	// kfake stores them but uses its broker configs
	// group.share.session.timeout.ms and group.share.heartbeat.interval.ms
	// (3 s and 100 ms here).
	HonoursGroupSessionTimeout bool
	// AcquiresWholeBatches: a batch_optimized ShareFetch acquires whole
	// producer batches, past MaxRecords. kfake acquires MaxRecords.
	AcquiresWholeBatches bool

	fake *kfake.Cluster
	cl   *kgo.Client
	adm  *kadm.Client
}

// Option configures a kfake cluster; real brokers ignore options.
type Option func(*fakeConfig)

type fakeConfig struct {
	brokers int
	configs map[string]string
}

// Brokers sets the number of kfake brokers (default 1).
func Brokers(n int) Option { return func(c *fakeConfig) { c.brokers = n } }

// BrokerConfig sets a kfake broker config.
func BrokerConfig(k, v string) Option { return func(c *fakeConfig) { c.configs[k] = v } }

// Real reports whether tests run against a real broker.
func Real() bool {
	v := os.Getenv(EnvBrokers)
	return v != "" && v != "kfake"
}

// New returns the cluster for t. A kfake cluster is closed when t ends.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	if Real() {
		return realCluster(t)
	}
	fc := &fakeConfig{brokers: 1, configs: map[string]string{
		"group.share.record.lock.duration.ms": strconv.Itoa(int(FakeLockDuration / time.Millisecond)),
		"share.record.lock.sweep.interval.ms": "100",
		"group.share.heartbeat.interval.ms":   "100",
		"group.share.session.timeout.ms":      "3000",
	}}
	for _, o := range opts {
		o(fc)
	}
	fake, err := kfake.NewCluster(kfake.NumBrokers(fc.brokers), kfake.BrokerConfigs(fc.configs))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(fake.Close)
	c := &Cluster{
		Kind:          "kfake",
		Version:       "kfake",
		Seeds:         fake.ListenAddrs(),
		LockDuration:  FakeLockDuration,
		DeliveryLimit: 5,
		LockSweep:     100 * time.Millisecond,
		fake:          fake,

		GroupDeliveryLimitConfig:     true,
		HonoursGroupDeliveryLimit:    false,
		HonoursGroupLockDuration:     false,
		RenewAckConfig:               false,
		BrokerDLQ:                    false,
		DescribesGroupConfigDefaults: false,
		StaleShareStartOffset:        false,
		ThrottlesRedelivery:          false,

		OverlapAckInvalidRecordState: false,
		RejectsRenewInFetch:          false,
		LeaveKeepsRecords:            false,
		FencedMemberKeepsRecords:     false,
		HonoursGroupSessionTimeout:   false,
		AcquiresWholeBatches:         false,
	}
	if v, ok := fc.configs["group.share.delivery.count.limit"]; ok {
		c.DeliveryLimit, _ = strconv.Atoi(v)
	}
	c.cl = c.Client(t)
	c.adm = kadm.NewClient(c.cl)
	return c
}

func realCluster(t testing.TB) *Cluster {
	t.Helper()
	seeds := strings.Split(os.Getenv(EnvBrokers), ",")
	c := &Cluster{
		Kind:      "kafka",
		Seeds:     seeds,
		LockSweep: 0,

		HonoursGroupLockDuration:     true,
		DescribesGroupConfigDefaults: true,
		StaleShareStartOffset:        true,
		ThrottlesRedelivery:          true,

		OverlapAckInvalidRecordState: true,
		RejectsRenewInFetch:          true,
		LeaveKeepsRecords:            true,
		FencedMemberKeepsRecords:     true,
		HonoursGroupSessionTimeout:   true,
		AcquiresWholeBatches:         true,
	}
	c.cl = c.Client(t)
	c.adm = kadm.NewClient(c.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cfg, err := groupcfg.Broker(ctx, c.cl, groupcfg.BrokerRecordLockDurationMs, groupcfg.BrokerDeliveryCountLimit)
	if err != nil {
		t.Fatalf("real broker %v: %v", seeds, err)
	}
	ms, _ := strconv.Atoi(cfg[groupcfg.BrokerRecordLockDurationMs])
	c.LockDuration = time.Duration(ms) * time.Millisecond
	c.DeliveryLimit, _ = strconv.Atoi(cfg[groupcfg.BrokerDeliveryCountLimit])
	if c.LockDuration == 0 || c.DeliveryLimit == 0 {
		t.Fatalf("real broker %v: lock duration %v, delivery limit %d: cannot read broker configs", seeds, c.LockDuration, c.DeliveryLimit)
	}
	// Apache Kafka describes every group config it knows, defaults
	// included, for any group name: the ones it knows say its version.
	known, err := groupcfg.Describe(ctx, c.cl, Name(t, "g-features"))
	if err != nil {
		t.Fatalf("real broker %v: describe group configs: %v", seeds, err)
	}
	has := func(k string) bool { _, ok := known[k]; return ok }
	c.GroupDeliveryLimitConfig = has(groupcfg.DeliveryCountLimit)
	c.HonoursGroupDeliveryLimit = c.GroupDeliveryLimitConfig
	c.RenewAckConfig = has(groupcfg.RenewAckEnable)
	c.BrokerDLQ = has(groupcfg.DLQTopicName)
	switch {
	case c.BrokerDLQ:
		c.Version = "4.4"
	case c.RenewAckConfig:
		c.Version = "4.3"
	default:
		c.Version = "4.2"
	}
	return c
}

// Client returns a plain client (producer and admin) closed when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Seeds...)}, opts...)...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client for the cluster.
func (c *Cluster) Admin() *kadm.Client { return c.adm }

// Fake returns the kfake cluster, or nil on a real broker.
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// Name returns a name unique to this test run, for topics and groups.
func Name(t testing.TB, kind string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// Kafka takes [a-zA-Z0-9._-] in topic names.
	n := strings.Map(func(r rune) rune {
		if r == '.' || r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, t.Name())
	if len(n) > 60 {
		n = n[:60]
	}
	return fmt.Sprintf("%s-%s-%s", kind, n, hex.EncodeToString(b))
}

// Topic creates a topic with a unique name and the given number of
// partitions, deleted when t ends.
func (c *Cluster) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := Name(t, "t")
	c.CreateTopic(t, name, partitions)
	return name
}

// CreateTopic creates the named topic, deleted when t ends.
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	c.CreateTopicWith(t, name, partitions, nil)
}

// CreateTopicWith creates the named topic with topic configs, deleted when
// t ends. It returns once the broker's metadata lists every partition with
// a leader: CreateTopics answers when the controller has the topic, and a
// broker can still answer a metadata or ListOffsets request without it
// for a moment (seen on Kafka under load).
func (c *Cluster) CreateTopicWith(t testing.TB, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	createTopic(t, c.adm, name, partitions, configs)
}

// createTopic is [Cluster.CreateTopicWith] through adm.
func createTopic(t testing.TB, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, name)
	})
	ready := func() error {
		listed, err := adm.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		d, ok := listed[name]
		switch {
		case !ok:
			return fmt.Errorf("not in the metadata")
		case d.Err != nil:
			return d.Err
		case len(d.Partitions) != int(partitions) || slices.ContainsFunc(d.Partitions.Sorted(), func(p kadm.PartitionDetail) bool { return p.Leader < 0 || p.Err != nil }):
			return fmt.Errorf("partitions without a leader: %v", d.Partitions)
		}
		// Every leader serves the partition: its end offset can be read.
		ends, err := adm.ListEndOffsets(ctx, name)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[name]) != int(partitions) {
			err = fmt.Errorf("end offsets of %d of %d partitions", len(ends[name]), partitions)
		}
		return err
	}
	for {
		err := ready()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s: created, but not served within 30s: %v", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Group returns a unique share group name whose share.auto.offset.reset
// is earliest, so it sees records produced before it joins.
func (c *Cluster) Group(t testing.TB) string {
	t.Helper()
	return c.GroupWith(t, map[string]string{groupcfg.AutoOffsetReset: "earliest"})
}

// GroupWith returns a unique share group name with the given group configs
// set (none: the broker's defaults, so share.auto.offset.reset is latest).
// The group is deleted when t ends.
func (c *Cluster) GroupWith(t testing.TB, configs map[string]string) string {
	t.Helper()
	g := Name(t, "g")
	if len(configs) > 0 {
		c.SetGroupConfig(t, g, configs)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, _ = c.adm.DeleteGroup(ctx, g)
	})
	return g
}

// SetGroupConfig sets group configs and waits until the broker describes
// them back: right after a group config is set, Apache Kafka can still
// describe (and apply) the old value for a moment, most visibly on a
// brand-new broker.
func (c *Cluster) SetGroupConfig(t testing.TB, group string, configs map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := groupcfg.Set(ctx, c.cl, group, configs); err != nil {
		t.Fatalf("group %s: %v", group, err)
	}
	names := slices.Sorted(maps.Keys(configs))
	var got map[string]string
	for {
		var err error
		got, err = groupcfg.Describe(ctx, c.cl, group, names...)
		if err == nil && maps.Equal(got, configs) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s: set %v, broker still describes %v (err %v)", group, configs, got, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Produce writes records and waits for them to be acknowledged.
func (c *Cluster) Produce(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// ProduceBatch writes recs as one producer batch per partition (as long
// as they fit in one), each to its Partition (0 when unset), failing t on
// an error. Produce's ProduceSync may split one call into several
// batches: with franz-go's default linger of 0 the first record can leave
// alone while the others are appended. Here a client that flushes only
// when told buffers them all first, once it knows their topics'
// partitions: a record produced while the client waits for its topic's
// metadata is placed in its partition when the metadata comes, one record
// at a time, and a flush already under way sends the first ones alone (a
// loaded machine split a batch so: TestBatchOptimizedOnceTheCreditCoversABatch
// saw batches smaller than it wrote).
func (c *Cluster) ProduceBatch(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	cl := c.Client(t, kgo.ManualFlushing(), kgo.MaxBufferedRecords(len(recs)+1), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	loaded := map[string]bool{}
	for _, r := range recs {
		if loaded[r.Topic] {
			continue
		}
		loaded[r.Topic] = true
		// A record for a partition no topic has fails once the client has
		// the topic's metadata, and is never sent.
		done := make(chan error, 1)
		cl.Produce(ctx, &kgo.Record{Topic: r.Topic, Partition: math.MaxInt32}, func(_ *kgo.Record, err error) { done <- err })
		if err := <-done; err == nil || ctx.Err() != nil {
			t.Fatalf("produce batch: loading the partitions of %s: %v", r.Topic, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(recs))
	for _, r := range recs {
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				errs <- err
			}
			wg.Done()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("produce batch: flush: %v", err)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("produce batch: %v", err)
	}
}

// Consume reads the first n records of topic with a plain consumer from
// the log start, failing t if they are not all there within 60 s.
func (c *Cluster) Consume(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	return consume(t, c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())), topic, n)
}

// consume polls cl, a consumer of topic from its start, for n records.
func consume(t testing.TB, cl *kgo.Client, topic string, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s before the timeout", len(out), n, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// ShareConsumer returns a raw share-group client on topics, closed when t
// ends; tests use it to play another member of a group.
func (c *Cluster) ShareConsumer(t testing.TB, group string, topics []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return c.Client(t, append([]kgo.Opt{
		kgo.ShareGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)...)
}

// Run starts run (a worker's Run) in a goroutine with a context of its own
// and returns stop, which cancels that context and returns run's error;
// stop is safe to call more than once and is called when t ends. A run
// that does not return within 60 s of stop fails t.
func Run(t testing.TB, run func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(60 * time.Second):
				t.Errorf("worker did not stop within 60s of its context's end")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
