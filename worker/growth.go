package worker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/shareq/shareq/internal/groupcfg"
)

// growthCheck looks for records a share group skipped on partitions added
// to a handled topic while the worker runs. On Apache Kafka before 4.4 the
// group coordinator starts a partition added to a topic the group already
// consumes as it starts a new subscription: at share.auto.offset.reset,
// whose default is latest, so the records written to it before the group
// started it are never delivered (KAFKA-20742; 4.4 starts such partitions
// at offset 0). A group with share.auto.offset.reset=earliest loses
// nothing.
//
// The broker says nothing of it, so the check compares, for each added
// partition, the group's share-partition start offset, once the group has
// one (DescribeShareGroupOffsets), with the partition's first offset
// (ListOffsets): a start past the first record means the records in
// between were skipped. Records the group delivered and acknowledged
// before the check first saw the start offset move it too, so the log
// says "up to". Kafka reports no start offset (-1) for a partition until
// the group first writes its state there (an acknowledgement), so a
// partition that gets no record after the group started it is reported
// only once one arrives and is done. It costs two requests per watch
// tick, and only while an added partition is not started yet: nothing
// while the partition count stays the same. It runs only for a group not
// set to earliest, on brokers not known to run 4.4 or newer. (kfake
// starts added partitions like Kafka before 4.4 but reports 4.4's
// metadata.version, so on kfake it does not run.)
//
// Owned by the topic watch goroutine.
type growthCheck struct {
	w       *Worker
	adm     *kadm.Client
	log     *slog.Logger
	obs     GrowthObserver
	pending map[string]map[int32]bool // topic → added partitions the group has not started yet
}

func newGrowthCheck(w *Worker, adm *kadm.Client, log *slog.Logger) *growthCheck {
	obs, ok := w.cfg.observer.(GrowthObserver)
	if !ok {
		obs = nopGrowthObserver{}
	}
	return &growthCheck{w: w, adm: adm, log: log, obs: obs, pending: map[string]map[int32]bool{}}
}

// added records that topic grew from old to n partitions.
func (g *growthCheck) added(topic string, old, n int) {
	g.log.Info("partitions added to a topic: the group's members take them up with their next assignment",
		"topic", topic, "partitions_before", old, "partitions", n)
	if l := g.w.brokerLine; g.w.groupReset == "earliest" || l.known() && !l.before(metadataVersion44) {
		return // the group starts them at the earliest offset, or the broker starts them at 0 (4.4+)
	}
	if g.pending[topic] == nil {
		g.pending[topic] = map[int32]bool{}
	}
	for p := old; p < n; p++ {
		g.pending[topic][int32(p)] = true
	}
}

// forget drops the pending partitions of a topic that was re-created.
func (g *growthCheck) forget(topic string) { delete(g.pending, topic) }

// check looks at the pending partitions once. A failed request leaves them
// pending for the next tick.
func (g *growthCheck) check(ctx context.Context) {
	if len(g.pending) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, topicWatchEvery)
	defer cancel()
	described, err := g.adm.DescribeShareGroupOffsets(ctx, g.w.cfg.group)
	if err != nil {
		return
	}
	d := described[g.w.cfg.group]
	if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
		return
	}
	topics := slices.Sorted(maps.Keys(g.pending))
	starts, err := g.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return
	}
	for _, topic := range topics {
		for _, p := range slices.Sorted(maps.Keys(g.pending[topic])) {
			so, ok := d.Offsets.Lookup(topic, p)
			first, fok := starts.Lookup(topic, p)
			if !ok || so.Err != nil || so.StartOffset < 0 || !fok || first.Err != nil {
				continue // not started yet (or not readable now): next tick
			}
			delete(g.pending[topic], p)
			if so.StartOffset > first.Offset {
				g.skipped(topic, p, first.Offset, so.StartOffset)
			}
		}
		if len(g.pending[topic]) == 0 {
			delete(g.pending, topic)
		}
	}
}

// skipped says, in one log line, that the group started an added
// partition past its first record, and what to do.
func (g *growthCheck) skipped(topic string, p int32, first, start int64) {
	group := g.w.cfg.group
	brokers := g.w.bootstrap()
	g.log.Error("a partition added to the topic was started past its first record: on "+g.w.brokerLine.String()+
		" a share group starts a partition added to a topic at share.auto.offset.reset, latest here, not at offset 0 (KAFKA-20742, fixed in Kafka 4.4), so up to that many records written before the group started it may never have been delivered;"+
		" set AutoOffsetReset(\"earliest\") (it changes only where partitions not started yet begin) or upgrade the brokers to Kafka 4.4, and deliver these again: stop every worker of the group, then run kafka-share-groups.sh --bootstrap-server "+brokers+
		" --group "+group+" --topic "+topic+":"+strconv.Itoa(int(p))+" --reset-offsets --to-earliest --execute"+
		" (it delivers the partition's records since offset "+strconv.FormatInt(first, 10)+" again, those already done too: with the idempotency middleware their claims absorb them)",
		"topic", topic, "partition", p, "first_offset", first, "group_start_offset", start, "records", start-first, "offset_reset", groupcfg.AutoOffsetReset+"="+cmp.Or(g.w.groupReset, "latest"))
	g.obs.PartitionSkipped(topic, p, start-first)
}

// nopGrowthObserver stands in when no observer implements GrowthObserver.
type nopGrowthObserver struct{}

func (nopGrowthObserver) PartitionSkipped(string, int32, int64) {}
