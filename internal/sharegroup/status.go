package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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

// status is what "shareq status" shows; it is also the -json shape.
type Status struct {
	Group       string `json:"group"`
	State       string `json:"state"`
	Coordinator int32  `json:"coordinator"`
	GroupEpoch  int32  `json:"group_epoch"`
	// TotalLag sums the known lags; partitions the group has not started
	// on (no start offset) are not counted, and NoStartOffset counts them.
	TotalLag      int64       `json:"total_lag"`
	NoStartOffset int         `json:"partitions_without_start_offset"`
	Members       []Member    `json:"members"`
	Partitions    []Partition `json:"partitions"`
}

type Member struct {
	MemberID string            `json:"member_id"`
	ClientID string            `json:"client_id"`
	Host     string            `json:"host"`
	Epoch    int32             `json:"member_epoch"`
	State    string            `json:"state"` // joined or joining`
	Assigned []TopicPartitions `json:"assigned"`
}

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
	Error         string `json:"error,omitempty"`
}

// Gather gathers the status of g: its members and the offsets of its
// partitions,: those it has share
// state for and those assigned to its members.
func Gather(ctx context.Context, adm *kadm.Client, g kadm.DescribedShareGroup) (*Status, error) {
	st := &Status{
		Group: g.GroupID, State: g.GroupState, Coordinator: g.Coordinator.NodeID, GroupEpoch: g.GroupEpoch,
		Members: []Member{}, Partitions: []Partition{},
	}
	type tp struct {
		topic     string
		partition int32
	}
	parts := map[tp]*Partition{}
	add := func(topic string, p int32) *Partition {
		k := tp{topic, p}
		if parts[k] == nil {
			parts[k] = &Partition{Topic: topic, Partition: p}
		}
		return parts[k]
	}
	for _, m := range g.Members {
		ms := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Epoch: m.MemberEpoch, State: "joined", Assigned: []TopicPartitions{}}
		if m.MemberEpoch < g.AssignmentEpoch {
			ms.State = "joining"
		}
		for _, t := range m.Assignment.Sorted() {
			ms.Assigned = append(ms.Assigned, TopicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			for _, p := range t.Partitions {
				add(t.Topic, p)
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
			ps := add(o.Topic, o.Partition)
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

	var topics []string
	for k := range parts {
		if !slices.Contains(topics, k.topic) {
			topics = append(topics, k.topic)
		}
	}
	if len(topics) > 0 {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err != nil && len(ends) == 0 {
			return nil, fmt.Errorf("list end offsets of %s: %w", strings.Join(topics, ", "), err)
		}
		for k, ps := range parts {
			if o, ok := ends.Lookup(k.topic, k.partition); ok && o.Err == nil && o.Offset >= 0 {
				ps.HighWatermark = ptr(o.Offset)
			} else if ps.Error == "" {
				if ok && o.Err != nil {
					ps.Error = "high watermark: " + o.Err.Error()
				} else if o, ok := ends.Lookup(k.topic, -1); ok && o.Err != nil {
					ps.Error = "high watermark: " + o.Err.Error()
				}
			}
		}
	}

	for _, ps := range parts {
		st.Partitions = append(st.Partitions, *ps)
		if ps.Lag != nil {
			st.TotalLag += *ps.Lag
		}
		if ps.StartOffset == nil {
			st.NoStartOffset++
		}
	}
	slices.SortFunc(st.Partitions, func(a, b Partition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return st, nil
}

func ptr[T any](v T) *T { return &v }
