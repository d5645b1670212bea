package sharegroup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/groupcfg"
)

// NotFoundError is returned by [Describe] when no group of any type has
// the name.
type NotFoundError struct{ Group string }

func (e *NotFoundError) Error() string { return "share group " + e.Group + " not found" }

// Describe describes group, which must be a share group. A
// group that does not exist is a *[NotFoundError]; a group of another
// type (a consumer group) is an error that says so.
func Describe(ctx context.Context, adm *kadm.Client, group string) (kadm.DescribedShareGroup, error) {
	var (
		g  kadm.DescribedShareGroup
		ok bool
	)
	err := UntilCoordinatorReady(ctx, func() error {
		g, ok = kadm.DescribedShareGroup{}, false
		described, err := adm.DescribeShareGroups(ctx, group)
		if err != nil {
			return err
		}
		g, ok = described[group]
		return g.Err
	})
	if err != nil && !ok {
		return kadm.DescribedShareGroup{}, fmt.Errorf("describe share group %s: %w", group, err)
	}
	if ok && g.Err == nil {
		return g, nil
	}
	// The broker answers GROUP_ID_NOT_FOUND both for a missing group and
	// for a group of another type; the group list tells them apart.
	listed, lerr := adm.ListGroupsByType(ctx, nil)
	if l, found := listed[group]; found && l.GroupType != "" && !strings.EqualFold(l.GroupType, "share") {
		return g, fmt.Errorf("%s is a %s group, not a share group", group, groupKind(l))
	}
	switch {
	case !ok:
		return g, fmt.Errorf("describe share group %s: no answer from its coordinator", group)
	case errors.Is(g.Err, kerr.GroupIDNotFound):
		if lerr != nil {
			return g, fmt.Errorf("share group %s not found (listing groups to check its type: %v)", group, lerr)
		}
		return g, &NotFoundError{Group: group}
	}
	return g, fmt.Errorf("describe share group %s: %w", group, g.Err)
}

// DescribeOffsets describes the share group's start offsets and lags; ok
// is false when the broker has no answer for the group.
func DescribeOffsets(ctx context.Context, adm *kadm.Client, group string) (d kadm.DescribedShareGroupOffsets, ok bool, err error) {
	err = UntilCoordinatorReady(ctx, func() error {
		d, ok = kadm.DescribedShareGroupOffsets{}, false
		described, err := adm.DescribeShareGroupOffsets(ctx, group)
		if err != nil {
			return err
		}
		d, ok = described[group]
		return d.Err
	})
	if err != nil {
		return d, false, fmt.Errorf("describe offsets of share group %s: %w", group, err)
	}
	return d, ok, nil
}

// groupKind names a listed group's type as an operator knows it: classic
// and KIP-848 groups are both consumer groups.
func groupKind(l kadm.ListedGroup) string {
	switch t := strings.ToLower(l.GroupType); t {
	case "classic":
		if l.ProtocolType == "" || l.ProtocolType == "consumer" {
			return "consumer"
		}
		return "classic " + l.ProtocolType
	default:
		return t
	}
}

// Status is what "shareq status" and the console's group pages show; it
// is also the shape of "shareq status -json".
//
// A partition's lag is unknown while the group has no start offset for it:
// the group has not fetched from it yet, or (Apache Kafka) the broker has
// not written its share state yet (docs/architecture.md, fact 16). Such a partition
// never counts as 0: TotalLag is null then, LagAtLeast says what is known,
// and the partition's Waiting says what its log holds for the group.
type Status struct {
	Group       string `json:"group"`
	State       string `json:"state"`
	Coordinator int32  `json:"coordinator"`
	GroupEpoch  int32  `json:"group_epoch"`
	// TotalLag sums the partitions' lags; null when the lag of any
	// partition is unknown (not started, an error, or not reported), and
	// when the group has no partitions (it never fetched and has no
	// members: there is nothing to know the lag of).
	TotalLag *int64 `json:"total_lag"`
	// LagAtLeast is what is known of the total lag: the known lags, plus
	// the Waiting of the partitions not started where it is known. It is
	// TotalLag when that is known.
	LagAtLeast int64 `json:"lag_at_least"`
	// NoStartOffset counts the partitions the group has no start offset
	// for yet (partitions with an Error aside).
	NoStartOffset int `json:"partitions_without_start_offset"`
	// InLogNotStarted is the records in the logs of those partitions,
	// from their log start offset to their high watermark (of those
	// whose offsets could be listed).
	InLogNotStarted int64 `json:"records_in_log_not_started"`
	// AutoOffsetReset is the group's share.auto.offset.reset (where a
	// partition's start offset begins when the group first fetches from
	// it), read only when some partition has no start offset; "" when
	// none has, or when it could not be read (AutoOffsetResetError says
	// why).
	AutoOffsetReset      string      `json:"auto_offset_reset,omitempty"`
	AutoOffsetResetError string      `json:"auto_offset_reset_error,omitempty"`
	Members              []Member    `json:"members"`
	Partitions           []Partition `json:"partitions"`
}

// Member is a member of the group and what it is assigned.
type Member struct {
	MemberID string            `json:"member_id"`
	ClientID string            `json:"client_id"`
	Host     string            `json:"host"`
	Epoch    int32             `json:"member_epoch"`
	State    string            `json:"state"` // joined or joining
	Assigned []TopicPartitions `json:"assigned"`
}

// TopicPartitions are partitions of a topic.
type TopicPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// Partition is one partition's standing; null fields are unknown.
//
// There is no in-flight count: DescribeShareGroupOffsets (KIP-932,
// KIP-1226) reports only the start offset and the lag, and the in-flight
// state lives in the partition leader (ReadShareGroupState is an
// inter-broker API). Lag includes in-flight records.
type Partition struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	StartOffset   *int64 `json:"start_offset"`
	Lag           *int64 `json:"lag"`
	HighWatermark *int64 `json:"high_watermark"`
	// LogStartOffset is the partition's first offset still in the log;
	// only for a partition without a start offset.
	LogStartOffset *int64 `json:"log_start_offset,omitempty"`
	// Waiting is, for a partition without a start offset, the records
	// the group is delivered from it when it starts, when that is known:
	// with share.auto.offset.reset=earliest, every record in its log
	// (HighWatermark minus LogStartOffset). Absent with latest (the
	// first fetch starts at the end of the log) and by_duration.
	Waiting *int64 `json:"waiting,omitempty"`
	Error   string `json:"error,omitempty"`
}

// InLog is the records of a partition without a start offset from its
// log start to its high watermark; nil when it has a start offset or
// when either is unknown.
func (p Partition) InLog() *int64 {
	if p.StartOffset != nil || p.LogStartOffset == nil || p.HighWatermark == nil {
		return nil
	}
	return ptr(max(*p.HighWatermark-*p.LogStartOffset, 0))
}

// Gather gathers the status of g: its members and the offsets of its
// partitions: those it has share state for and those assigned to its
// members. For partitions without a start offset it also lists their log
// start offsets and reads the group's share.auto.offset.reset.
func Gather(ctx context.Context, cl *kgo.Client, g kadm.DescribedShareGroup) (*Status, error) {
	adm := kadm.NewClient(cl)
	st := &Status{
		Group: g.GroupID, State: g.GroupState, Coordinator: g.Coordinator.NodeID, GroupEpoch: g.GroupEpoch,
		Members: []Member{}, Partitions: []Partition{},
	}
	parts := partitions{}
	for _, m := range g.Members {
		ms := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Epoch: m.MemberEpoch, State: "joined", Assigned: []TopicPartitions{}}
		if m.MemberEpoch < g.AssignmentEpoch {
			ms.State = "joining"
		}
		for _, t := range m.Assignment.Sorted() {
			ms.Assigned = append(ms.Assigned, TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			for _, p := range t.Partitions {
				parts.add(t.Topic, p)
			}
		}
		st.Members = append(st.Members, ms)
	}

	d, ok, err := DescribeOffsets(ctx, adm, g.GroupID)
	if err != nil {
		return nil, err
	}
	if ok {
		for _, o := range d.Offsets.Sorted() {
			ps := parts.add(o.Topic, o.Partition)
			if o.Err != nil {
				ps.Error = o.Err.Error()
				continue
			}
			if o.StartOffset >= 0 {
				ps.StartOffset = ptr(o.StartOffset)
			}
			if o.Lag >= 0 {
				ps.Lag = ptr(o.Lag)
			}
		}
	}
	if err := parts.listEnds(ctx, adm); err != nil {
		return nil, err
	}
	if parts.notStarted() {
		if err := parts.listStarts(ctx, adm); err != nil {
			return nil, err
		}
		st.AutoOffsetReset, err = autoOffsetReset(ctx, cl, g.GroupID)
		if err != nil {
			st.AutoOffsetResetError = err.Error()
		}
	}

	for _, ps := range parts {
		st.Partitions = append(st.Partitions, *ps)
	}
	slices.SortFunc(st.Partitions, func(a, b Partition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	st.total()
	return st, nil
}

// total sets what is waiting in the partitions not started and sums the
// partitions into the status's totals.
func (st *Status) total() {
	known := len(st.Partitions) > 0 // no partitions: nothing is known
	for i, p := range st.Partitions {
		if p.StartOffset == nil && p.Lag == nil && st.AutoOffsetReset == "earliest" {
			p.Waiting = p.InLog()
			st.Partitions[i].Waiting = p.Waiting
		}
		switch {
		case p.Lag != nil:
			st.LagAtLeast += *p.Lag
		case p.Waiting != nil:
			st.LagAtLeast += *p.Waiting
			known = false
		default:
			known = false
		}
		if p.StartOffset == nil && p.Error == "" {
			st.NoStartOffset++
			if n := p.InLog(); n != nil {
				st.InLogNotStarted += *n
			}
		}
	}
	if known {
		st.TotalLag = ptr(st.LagAtLeast)
	}
}

// autoOffsetReset reads the group's share.auto.offset.reset: the
// broker's default, latest, when neither the group nor the broker
// describes one (kfake describes no defaults).
func autoOffsetReset(ctx context.Context, cl *kgo.Client, group string) (string, error) {
	vals, err := groupcfg.Describe(ctx, cl, group, groupcfg.AutoOffsetReset)
	if err != nil {
		return "", err
	}
	return cmp.Or(vals[groupcfg.AutoOffsetReset], "latest"), nil
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitions are the partitions a status shows, as it gathers them.
type partitions map[topicPartition]*Partition

// add returns the partition, adding it when it is new.
func (ps partitions) add(topic string, p int32) *Partition {
	k := topicPartition{topic, p}
	if ps[k] == nil {
		ps[k] = &Partition{Topic: topic, Partition: p}
	}
	return ps[k]
}

// topics are the topics of ps, or (notStarted) of those without a start
// offset.
func (ps partitions) topics(notStarted bool) []string {
	var topics []string
	for k, p := range ps {
		if (!notStarted || p.StartOffset == nil) && !slices.Contains(topics, k.topic) {
			topics = append(topics, k.topic)
		}
	}
	slices.Sort(topics)
	return topics
}

func (ps partitions) notStarted() bool {
	for _, p := range ps {
		if p.StartOffset == nil && p.Error == "" {
			return true
		}
	}
	return false
}

// listEnds sets the high watermarks.
func (ps partitions) listEnds(ctx context.Context, adm *kadm.Client) error {
	topics := ps.topics(false)
	if len(topics) == 0 {
		return nil
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil && len(ends) == 0 {
		return fmt.Errorf("list end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	for k, p := range ps {
		p.HighWatermark = ps.offset(ends, k, p, "high watermark")
	}
	return nil
}

// listStarts sets the log start offsets of the partitions without a
// start offset.
func (ps partitions) listStarts(ctx context.Context, adm *kadm.Client) error {
	topics := ps.topics(true)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil && len(starts) == 0 {
		return fmt.Errorf("list log start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	for k, p := range ps {
		if p.StartOffset == nil {
			p.LogStartOffset = ps.offset(starts, k, p, "log start offset")
		}
	}
	return nil
}

// offset returns the listed offset of k, or nil; when there is none and p
// has no error yet, p's error says why.
func (partitions) offset(listed kadm.ListedOffsets, k topicPartition, p *Partition, what string) *int64 {
	o, ok := listed.Lookup(k.topic, k.partition)
	if ok && o.Err == nil && o.Offset >= 0 {
		return ptr(o.Offset)
	}
	if p.Error == "" {
		if ok && o.Err != nil {
			p.Error = what + ": " + o.Err.Error()
		} else if o, ok := listed.Lookup(k.topic, -1); ok && o.Err != nil {
			p.Error = what + ": " + o.Err.Error()
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
