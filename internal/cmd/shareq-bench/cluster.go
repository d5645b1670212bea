package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/groupcfg"
)

// fakeLockDuration is the record lock duration of the in-process kfake
// cluster, as in the test suite (internal/kafkatest).
const fakeLockDuration = 2 * time.Second

// cluster is the Kafka one backend of a run talks to.
type cluster struct {
	kind  string // "kfake" or "kafka"
	seeds []string
	lock  time.Duration // broker record lock duration
	fake  *kfake.Cluster
	cl    *kgo.Client
	adm   *kadm.Client
	run   string // unique prefix of this run's topics and groups

	topics []string
	groups []string

	// replication is the replication factor of the run's topics: 1 on
	// kfake, min(3, brokers) on Kafka (a cluster's min.insync.replicas
	// refuses acks=all produces to fewer replicas).
	replication int16
}

// newCluster starts an in-process kfake cluster (broker "kfake", or
// "kfake3" for three brokers) or connects to the real brokers at broker
// (host:port,...).
func newCluster(ctx context.Context, broker string) (*cluster, error) {
	c := &cluster{kind: "kafka", run: "shareq-bench-" + randHex(4), replication: 1}
	if broker == "kfake" || broker == "kfake3" {
		n := 1
		if broker == "kfake3" {
			n = 3
		}
		fake, err := kfake.NewCluster(kfake.NumBrokers(n), kfake.BrokerConfigs(map[string]string{
			"group.share.record.lock.duration.ms": strconv.Itoa(int(fakeLockDuration / time.Millisecond)),
			"share.record.lock.sweep.interval.ms": "100",
			"group.share.heartbeat.interval.ms":   "100",
			"group.share.session.timeout.ms":      "3000",
		}))
		if err != nil {
			return nil, fmt.Errorf("kfake: %w", err)
		}
		c.kind, c.fake, c.seeds, c.lock = "kfake", fake, fake.ListenAddrs(), fakeLockDuration
	} else {
		c.seeds = strings.Split(broker, ",")
	}
	// enqueue.Partitioner: keyless jobs spread evenly over partitions, as
	// shareq's producers spread them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(enqueue.Partitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(50000))
	if err != nil {
		c.close()
		return nil, err
	}
	c.cl, c.adm = cl, kadm.NewClient(cl)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		c.close()
		return nil, fmt.Errorf("broker %v: %w (start it with scripts/kafka.sh up)", c.seeds, err)
	}
	if c.fake == nil {
		cfg, err := groupcfg.Broker(pctx, cl, groupcfg.BrokerRecordLockDurationMs)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("broker %v: %w", c.seeds, err)
		}
		ms, _ := strconv.Atoi(cfg[groupcfg.BrokerRecordLockDurationMs])
		if ms <= 0 {
			c.close()
			return nil, fmt.Errorf("broker %v: cannot read %s", c.seeds, groupcfg.BrokerRecordLockDurationMs)
		}
		c.lock = time.Duration(ms) * time.Millisecond
		n, err := c.brokers(pctx)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("broker %v: %w", c.seeds, err)
		}
		c.replication = int16(min(3, n))
	}
	return c, nil
}

// brokers returns the number of brokers in the cluster's metadata.
func (c *cluster) brokers(ctx context.Context) (int, error) {
	md, err := c.adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, err
	}
	return len(md.Brokers), nil
}

// close deletes the run's topics and groups and closes the clients.
func (c *cluster) close() {
	if c.adm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for _, g := range c.groups {
			_, _ = c.adm.DeleteGroup(ctx, g)
		}
		if len(c.topics) > 0 {
			_, _ = c.adm.DeleteTopics(ctx, c.topics...)
		}
		cancel()
	}
	if c.cl != nil {
		c.cl.Close()
	}
	if c.fake != nil {
		c.fake.Close()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// topic creates a topic named after the run and what, with partitions.
func (c *cluster) topic(ctx context.Context, what string, partitions int32) (string, error) {
	name := c.run + "-" + what + "-" + randHex(2)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.adm.CreateTopic(ctx, partitions, c.replication, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("create topic %s: %w", name, err)
	}
	c.topics = append(c.topics, name)
	// A new topic's leaders take a moment to be known everywhere.
	for ctx.Err() == nil {
		md, err := c.adm.ListTopics(ctx, name)
		if err == nil && md[name].Err == nil && len(md[name].Partitions) == int(partitions) {
			ok := true
			for _, p := range md[name].Partitions {
				ok = ok && p.Leader >= 0
			}
			if ok {
				return name, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("topic %s: no leaders: %w", name, ctx.Err())
}

// shareGroup returns a new share group name whose
// share.auto.offset.reset is earliest.
func (c *cluster) shareGroup(ctx context.Context, what string) (string, error) {
	g := c.run + "-" + what + "-" + randHex(2)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := groupcfg.Set(ctx, c.cl, g, map[string]string{groupcfg.AutoOffsetReset: "earliest"}); err != nil {
		return "", err
	}
	c.groups = append(c.groups, g)
	return g, nil
}

// classicGroup returns a new consumer group name.
func (c *cluster) classicGroup(what string) string {
	g := c.run + "-" + what + "-" + randHex(2)
	c.groups = append(c.groups, g)
	return g
}

// produce writes recs and waits for all of them to be acknowledged.
func (c *cluster) produce(ctx context.Context, recs []*kgo.Record) error {
	return produceAll(ctx, c.cl, recs)
}

// produceBatched is produce with producer batches of at most maxBytes
// (the cluster's client makes them up to 1 MiB), through a client of its
// own; 0: produce.
func (c *cluster) produceBatched(ctx context.Context, recs []*kgo.Record, maxBytes int32) error {
	if maxBytes == 0 {
		return c.produce(ctx, recs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(enqueue.Partitioner()),
		kgo.ProducerBatchMaxBytes(maxBytes), kgo.MaxBufferedRecords(50000))
	if err != nil {
		return err
	}
	defer cl.Close()
	return produceAll(ctx, cl, recs)
}

// produceAll produces recs through cl in chunks and waits for them.
func produceAll(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	const chunk = 20000
	for i := 0; i < len(recs); i += chunk {
		if err := cl.ProduceSync(ctx, recs[i:min(i+chunk, len(recs))]...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// shareSettle is how long a share group's members must stay the same,
// all on the latest assignment, before waitShareMembers trusts it.
const shareSettle = time.Second

// waitShareMembers waits until group has at least workers members (a
// worker may run more than one), all with an assignment and all on the
// group's latest one (member epoch = the assignment epoch), and the same
// members for shareSettle, so that a measurement includes neither joining
// nor the rebalancing after it. The bench does not count a worker's
// members: that is the worker's business. A share group reports itself
// stable, with every member assigned, while some members still fetch on
// the partitions of an older assignment: they take records from
// partitions they are about to lose, and the members of those partitions
// are then busy (the renew scenario's makespan was 2.0× the job length in
// about half the kfake runs without the epoch check, 1.00× in 12 of 12
// with it).
func (c *cluster) waitShareMembers(ctx context.Context, group string, workers int) error {
	return c.waitShareMembersFor(ctx, group, workers, shareSettle)
}

// waitShareMembersFor is waitShareMembers with the members the same for
// settle rather than shareSettle (0: the first time they are all on the
// latest assignment).
func (c *cluster) waitShareMembersFor(ctx context.Context, group string, workers int, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last, settled string
	var since time.Time
	for {
		ds, err := c.adm.DescribeShareGroups(ctx, group)
		ok := false
		if err == nil {
			d := ds[group]
			assigned, current := 0, 0
			ids := make([]string, 0, len(d.Members))
			for _, m := range d.Members {
				if len(m.Assignment) > 0 {
					assigned++
				}
				if m.MemberEpoch == d.AssignmentEpoch {
					current++
				}
				ids = append(ids, m.MemberID)
			}
			slices.Sort(ids)
			n := len(d.Members)
			last = fmt.Sprintf("state %s, %d members, %d assigned, %d on assignment epoch %d", d.GroupState, n, assigned, current, d.AssignmentEpoch)
			ok = n >= workers && assigned == n && current == n && strings.EqualFold(d.GroupState, "stable")
			// The same members on the same assignment epoch.
			if now := fmt.Sprint(d.AssignmentEpoch, ids); ok && now != settled {
				settled, since = now, time.Time{}
			}
		} else {
			last = err.Error()
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= settle:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("share group %s did not settle with %d or more members on its latest assignment (%s)", group, workers, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitClassicStable waits until the consumer group is stable with want
// members and every partition of topic assigned, unchanged for settle.
func (c *cluster) waitClassicStable(ctx context.Context, group string, want int, partitions int, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var since time.Time
	var last string
	for {
		ds, err := c.adm.DescribeGroups(ctx, group)
		ok := false
		if err == nil {
			d := ds[group]
			n := 0
			for _, ps := range d.AssignedPartitions() {
				n += len(ps)
			}
			last = fmt.Sprintf("state %s, %d members, %d partitions assigned", d.State, len(d.Members), n)
			ok = d.State == "Stable" && len(d.Members) == want && n == partitions
		} else {
			last = err.Error()
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= settle:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer group %s did not settle (%s)", group, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errTimeout is returned by a scenario whose jobs did not all finish.
var errTimeout = errors.New("timed out")
