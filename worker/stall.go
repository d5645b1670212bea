package worker

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/member"
)

// The stall check looks for a partition the broker has stopped serving
// to the group. A share partition acquires no record past
// share.partition.max.record.locks (2,000 by default) records from its
// start offset, and its start offset moves only past records that are
// done. So a record that is never done holds the partition still: every
// fetch of it comes back empty though records wait, and nothing says so.
// Two things do that:
//
//   - a job that holds the record at the start offset for a long time (a
//     long job renewing its lock, on any worker of the group), while the
//     records after it are done: Kafka's design, and the partition moves
//     again when the job ends;
//   - the broker's share state for the partition stuck after a broker
//     restart (an Apache Kafka defect, reproduced on 4.3.1 and 4.4.0 with
//     no shareq code: make soak-broker-probe; RELIABILITY.md, "A
//     partition the broker stops serving"): the partition stays stopped
//     though every record from its start offset on is done, until the
//     broker restarts again (or, by Kafka's code, every member of the
//     group disconnects from it for a moment).
//
// The member says which assigned partitions have given nothing for
// stallAfter while it asked with credit to spare (member.Idle); for those
// the check reads the group's offsets (DescribeShareGroupOffsets) and the
// partitions' end offsets, and calls a partition stalled when records
// wait (the group's lag is more than the records of it this worker holds)
// and the records from its start offset to its end reach the limit. It
// logs one Error line when a partition stalls, with what to do, and one
// Info line when it moves again; the StallObserver hears both. It costs
// one request to the member's goroutine every 10 s, and two admin requests
// (and the group's limit once) each 10 s while a partition is stalled, each
// minute while partitions are idle but not stalled (an idle topic).
//
// Owned by the stall watch goroutine (watchStalls).
type stallCheck struct {
	w     *Worker
	cl    *kgo.Client
	adm   *kadm.Client
	log   *slog.Logger
	obs   StallObserver
	m     *member.Member
	limit int64 // the group's share.partition.max.record.locks; 0: not read yet
	// stalled are the partitions reported stalled: the group's start
	// offset then, and since when the member had had nothing of them.
	stalled map[topicPartition]stallEpisode
	// looked is when the check last read the offsets of an idle partition
	// not stalled: an idle topic (nothing produced) stays idle, and is
	// looked at again only every stallAfter / 2.
	looked map[topicPartition]time.Time
	// heal frees stalled partitions (HealStalls; heal.go), nil when off.
	heal *healer
}

type topicPartition struct {
	topic     string
	partition int32
}

type stallEpisode struct {
	start int64
	since time.Time
}

const (
	// stallAfterDefault is how long an assigned partition must give
	// nothing while the member asks before the stall check looks at the
	// group's offsets: longer than any wait a healthy partition shows
	// (a rebalance, a broker restart's state load of up to 17 s seen on a
	// starved machine).
	stallAfterDefault = 2 * time.Minute
	// stallMinEmptyFetches is the fewest fetches, asking for records and
	// coming back with none, that the member must have sent in that
	// time: a member with no credit (every handler busy, or paused) asks
	// for nothing and sees no stall.
	stallMinEmptyFetches = 10
	// inFlightLimitDefault is Kafka's group.share.partition.max.record.locks
	// default, the limit where the group does not set its own.
	inFlightLimitDefault = 2000
)

func newStallCheck(w *Worker, cl *kgo.Client, adm *kadm.Client, m *member.Member, log *slog.Logger) *stallCheck {
	obs, ok := w.cfg.observer.(StallObserver)
	if !ok {
		obs = nopStallObserver{}
	}
	return &stallCheck{w: w, cl: cl, adm: adm, m: m, log: log, obs: obs, stalled: map[topicPartition]stallEpisode{}, looked: map[topicPartition]time.Time{}}
}

// watchStalls runs the stall check every stallEvery until ctx is done.
func (w *Worker) watchStalls(ctx context.Context, cl *kgo.Client, m *member.Member, log *slog.Logger, clientID string) {
	c := newStallCheck(w, cl, kadm.NewClient(cl), m, log)
	c.heal = w.newHealer(cl, log, healSelf(clientID, m.Stats().MemberID))
	tick := time.NewTicker(w.cfg.stallEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.check(ctx)
		c.healStalled(ctx)
		if c.heal != nil {
			c.heal.watchPauses(ctx, time.Now())
		}
	}
}

// healStalled tries to heal the partitions stalled (HealStalls), one
// after the other, the check waiting meanwhile: each when it is reported,
// and again every healEvery while it stays stalled (heal bounds the
// tries), so a heal that gave up (the group busy) is tried again.
func (c *stallCheck) healStalled(ctx context.Context) {
	if c.heal == nil {
		return
	}
	for _, tp := range c.sortedStalled() {
		c.heal.heal(ctx, tp, c.stalled[tp].start)
	}
}

// check looks once. A request that fails leaves things as they were.
func (c *stallCheck) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, topicWatchEvery)
	defer cancel()
	idle, err := c.m.Idle(ctx, c.w.cfg.stallAfter, stallMinEmptyFetches)
	if err != nil {
		return
	}
	now := time.Now()
	isIdle := map[topicPartition]member.IdlePartition{}
	for _, p := range idle {
		isIdle[topicPartition{p.Topic, p.Partition}] = p
	}
	for _, tp := range c.sortedStalled() {
		if _, ok := isIdle[tp]; !ok {
			c.moved(tp, now, "the worker was given records of it again (or the partition went to another worker, or an operator paused its topic)")
		}
	}
	for tp, at := range c.looked {
		if _, ok := isIdle[tp]; !ok || now.Sub(at) >= c.w.cfg.stallAfter/2 {
			delete(c.looked, tp)
		}
	}
	idle = slices.DeleteFunc(idle, func(p member.IdlePartition) bool {
		_, recent := c.looked[topicPartition{p.Topic, p.Partition}]
		return recent
	})
	if len(idle) == 0 {
		return
	}
	described, err := c.adm.DescribeShareGroupOffsets(ctx, c.w.cfg.group)
	if err != nil {
		return
	}
	d := described[c.w.cfg.group]
	if d.Err != nil {
		return
	}
	var topics []string
	for _, p := range idle {
		if !slices.Contains(topics, p.Topic) {
			topics = append(topics, p.Topic)
		}
	}
	ends, err := c.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return
	}
	limit := c.inFlightLimit(ctx)
	for _, p := range idle {
		tp := topicPartition{p.Topic, p.Partition}
		so, ok := d.Offsets.Lookup(p.Topic, p.Partition)
		end, eok := ends.Lookup(p.Topic, p.Partition)
		if !ok || so.Err != nil || so.StartOffset < 0 || !eok || end.Err != nil {
			continue
		}
		// Records wait: the group's lag counts the records from the start
		// offset not done, this worker's among them. (A group with more
		// members than partitions shares a partition, and records another
		// member holds count as waiting here: the partition is full then
		// too, and a record produced to it would wait.)
		waiting := so.Lag - int64(p.Held)
		full := waiting > 0 && end.Offset-so.StartOffset >= limit
		if !full {
			c.looked[tp] = now
		}
		if ep, was := c.stalled[tp]; was {
			switch {
			case waiting <= 0:
				c.moved(tp, now, "no record of it waits any more")
			case so.StartOffset != ep.start:
				c.moved(tp, now, "the group's start offset on it moved")
			}
			continue
		}
		if full {
			c.stall(tp, p, so, end.Offset, waiting, limit, now)
		}
	}
}

// stall reports a partition stalled, in one log line.
func (c *stallCheck) stall(tp topicPartition, p member.IdlePartition, so kadm.ShareOffset, end, waiting, limit int64, now time.Time) {
	since := now.Add(-p.For)
	c.stalled[tp] = stallEpisode{start: so.StartOffset, since: since}
	brokers := c.w.bootstrap()
	c.log.Error("a partition gives the worker nothing though records wait: the broker acquires no record past "+
		strconv.FormatInt(limit, 10)+" from the group's start offset on it (share.partition.max.record.locks), and the start offset does not move;"+
		" either a job holds the record at the start offset (a long job renewing its lock, on any worker of the group: the partition moves when it ends),"+
		" or the broker's share state for the partition is stuck (seen on Kafka 4.3.1 and 4.4.0 after broker restarts): then restart the broker that leads the partition,"+
		" or stop every worker of the group for a few seconds (the broker reads the partition's state again once no member is connected)"+c.healNote()+";"+
		" see what the group holds with kafka-share-groups.sh --bootstrap-server "+brokers+" --describe --group "+c.w.cfg.group+" --offsets",
		"topic", tp.topic, "partition", tp.partition, "idle_for", p.For.Round(time.Second), "empty_fetches", p.EmptyFetches,
		"group_start_offset", so.StartOffset, "end_offset", end, "lag", so.Lag, "waiting", waiting, "held_here", p.Held, "record_locks_limit", limit)
	c.obs.PartitionStalled(tp.topic, tp.partition, true)
}

// healNote says in the stall's line whether the workers free the
// partition themselves.
func (c *stallCheck) healNote() string {
	if c.heal != nil {
		return ": HealStalls is on, so the workers try the second themselves (a \"stall heal\" line follows)"
	}
	return ", which worker.HealStalls(true) has the workers do themselves"
}

// moved reports a stalled partition moving again.
func (c *stallCheck) moved(tp topicPartition, now time.Time, why string) {
	ep := c.stalled[tp]
	delete(c.stalled, tp)
	c.log.Info("a stalled partition moves again: "+why, "topic", tp.topic, "partition", tp.partition,
		"stalled_for", now.Sub(ep.since).Round(time.Second))
	c.obs.PartitionStalled(tp.topic, tp.partition, false)
}

func (c *stallCheck) sortedStalled() []topicPartition {
	return slices.SortedFunc(maps.Keys(c.stalled), func(a, b topicPartition) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
}

// inFlightLimit returns the in-flight limit of the group's partitions,
// read once: the group's own share.partition.max.record.locks, else the
// brokers' group.share.partition.max.record.locks (kfake describes the
// group's default as 2,000 whatever the broker's is), else Kafka's
// default. A failed read is tried again at the next check.
func (c *stallCheck) inFlightLimit(ctx context.Context) int64 {
	if c.limit > 0 {
		return c.limit
	}
	values, own, err := groupcfg.DescribeOwn(ctx, c.cl, c.w.cfg.group, groupcfg.PartitionMaxRecordLocks)
	if err != nil {
		return inFlightLimitDefault
	}
	v := values[groupcfg.PartitionMaxRecordLocks]
	if !own[groupcfg.PartitionMaxRecordLocks] {
		b, err := groupcfg.Broker(ctx, c.cl, groupcfg.BrokerPartitionMaxRecordLocks)
		if err != nil {
			return inFlightLimitDefault
		}
		v = b[groupcfg.BrokerPartitionMaxRecordLocks]
	}
	c.limit = inFlightLimitDefault
	if n, perr := strconv.ParseInt(v, 10, 64); perr == nil && n > 0 {
		c.limit = n
	}
	return c.limit
}

// nopStallObserver stands in when no observer implements StallObserver.
type nopStallObserver struct{}

func (nopStallObserver) PartitionStalled(string, int32, bool) {}
