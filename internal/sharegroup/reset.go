package sharegroup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Target is where a reset moves the start offsets ("shareq reset -to").
type Target struct {
	// Where is "earliest", "latest" or "offset".
	Where string
	// Offset is the offset when Where is "offset".
	Offset int64
}

func (t Target) String() string {
	if t.Where == "offset" {
		return "offset " + strconv.FormatInt(t.Offset, 10)
	}
	return t.Where
}

// ParseTarget parses a reset target (the value of -to): "earliest", "latest", or an
// offset written as decimal digits only (no sign, no spaces), from 0 to
// the largest int64 less one.
func ParseTarget(s string) (Target, error) {
	switch s {
	case "earliest", "latest":
		return Target{Where: s}, nil
	case "":
		return Target{}, errors.New("-to is required: earliest, latest or an offset")
	}
	if strings.TrimLeft(s, "0123456789") != "" {
		return Target{}, fmt.Errorf("-to %q: want earliest, latest or an offset (a number from 0)", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == math.MaxInt64 {
		return Target{}, fmt.Errorf("-to %q: offset too large", s)
	}
	return Target{Where: "offset", Offset: n}, nil
}

// Row is one partition of a reset plan: where its start offset is
// (Current), where the reset moves it (Next), and the partition's log
// start and end.
type Row struct {
	Topic     string
	Partition int32
	Current   int64 // -1: none yet
	Next      int64
	LogStart  int64
	End       int64
	Note      string // why Next is not the target asked for
}

// Plan resolves target for every partition of topics; current holds the
// group's start offsets (from [DescribeOffsets]), empty for a new group.
func Plan(ctx context.Context, adm *kadm.Client, topics []string, current kadm.ShareOffsets, target Target) ([]Row, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	var rows []Row
	for _, t := range topics {
		if o, ok := ends.Lookup(t, -1); ok && o.Err != nil {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("topic %s does not exist", t)
			}
			return nil, fmt.Errorf("topic %s: %w", t, o.Err)
		}
		for _, p := range slices.Sorted(maps.Keys(ends[t])) {
			end := ends[t][p]
			start, ok := starts.Lookup(t, p)
			switch {
			case end.Err != nil:
				return nil, fmt.Errorf("end offset of %s/%d: %w", t, p, end.Err)
			case !ok:
				return nil, fmt.Errorf("start offset of %s/%d: not listed", t, p)
			case start.Err != nil:
				return nil, fmt.Errorf("start offset of %s/%d: %w", t, p, start.Err)
			}
			r := Row{Topic: t, Partition: p, Current: -1, LogStart: start.Offset, End: end.Offset}
			if o, ok := current.Lookup(t, p); ok && o.Err == nil && o.StartOffset >= 0 {
				r.Current = o.StartOffset
			}
			switch target.Where {
			case "earliest":
				r.Next = r.LogStart
			case "latest":
				r.Next = r.End
			default:
				r.Next = target.Offset
				if r.Next < r.LogStart {
					r.Next, r.Note = r.LogStart, fmt.Sprintf("%d is before the log start", target.Offset)
				} else if r.Next > r.End {
					r.Next, r.Note = r.End, fmt.Sprintf("%d is past the end", target.Offset)
				}
			}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no partitions in %s", strings.Join(topics, ", "))
	}
	return rows, nil
}

// Apply moves the start offsets of the (empty) share group to the rows'
// Next offsets. A group with members is refused by the broker; the error
// says to stop its workers.
func Apply(ctx context.Context, adm *kadm.Client, group string, rows []Row) error {
	offsets := kadm.Offsets{}
	for _, r := range rows {
		offsets.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Next})
	}
	var resp kadm.AlterShareGroupOffsetsResponses
	err := UntilCoordinatorReady(ctx, func() (err error) {
		resp, err = adm.AlterShareGroupOffsets(ctx, group, offsets)
		return err
	})
	if errors.Is(err, kerr.NonEmptyGroup) {
		return fmt.Errorf("group %s has active members; stop its workers first: %w", group, err)
	}
	if err != nil {
		return fmt.Errorf("reset start offsets of share group %s: %w", group, err)
	}
	var failed []string
	resp.EachError(func(t string, p int32, err error) {
		failed = append(failed, fmt.Sprintf("%s/%d: %v", t, p, err))
	})
	if len(failed) > 0 {
		slices.Sort(failed)
		return fmt.Errorf("reset start offsets of share group %s: %d of %d partitions failed: %s", group, len(failed), len(rows), strings.Join(failed, "; "))
	}
	return nil
}

// PlanReset plans moving the start offsets of group to target: in topic,
// or (topic "") in every topic the group has start offsets for. The group
// must be empty (its workers stopped); a new group, one that has never
// fetched, can be planned for with topic named.
func PlanReset(ctx context.Context, adm *kadm.Client, group, topic string, target Target) ([]Row, error) {
	g, err := Describe(ctx, adm, group)
	var notFound *NotFoundError
	isNew := errors.As(err, &notFound)
	switch {
	case isNew && topic == "":
		return nil, fmt.Errorf("%w (to give a new share group start offsets, name the topic with -topic)", err)
	case err != nil && !isNew:
		return nil, err
	case len(g.Members) > 0:
		return nil, fmt.Errorf("group %s has %s; stop its workers first", group, members(len(g.Members)))
	}

	current := kadm.ShareOffsets{}
	if !isNew {
		d, ok, err := DescribeOffsets(ctx, adm, group)
		if err != nil {
			return nil, err
		}
		if ok {
			current = d.Offsets
		}
	}
	topics := []string{topic}
	if topic == "" {
		topics = slices.Sorted(maps.Keys(current))
		if len(topics) == 0 {
			return nil, fmt.Errorf("share group %s has no start offsets yet (it has never fetched); name the topic with -topic", group)
		}
	}

	return Plan(ctx, adm, topics, current, target)
}

// members says "1 active member" or "n active members".
func members(n int) string {
	if n == 1 {
		return "1 active member"
	}
	return strconv.Itoa(n) + " active members"
}
