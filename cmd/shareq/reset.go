package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

const resetUsage = `usage: shareq reset GROUP -to earliest|latest|OFFSET [flags]

Moves the start offsets of the share group GROUP: where, in each partition,
the group's undone records begin.

  -to earliest  the oldest record still in the log (the log start offset)
  -to latest    the partition's end (the high watermark): only records
                produced from now on will be delivered
  -to OFFSET    this offset in every partition, kept within the log: an
                offset before the log start becomes the log start, one past
                the end becomes the end

It resets every topic the group has start offsets for, or only -topic. A
new group (one that has never fetched) can be given start offsets too, with
-topic, before its workers first start.

The group must be empty: stop its workers first. Without -yes, reset prints
what it would do, changes nothing and exits with status 1; CI and scripts
pass -yes.

After a reset the group delivers every record from the new start offset on,
including records it had already accepted, with delivery counts starting
again from zero; records before the new start offset are never delivered
to the group.

This is not the group config share.auto.offset.reset. That config says
where a share group starts in a partition it has no start offset for yet
(when it first fetches from it); it does not move a group that has one.
Reset moves the start offsets themselves.

Flags may come before or after GROUP.
`

// errNotConfirmed: reset ran without -yes and changed nothing.
var errNotConfirmed = errors.New("nothing changed: run again with -yes to reset the start offsets")

// resetTarget is where "shareq reset -to" moves the start offsets.
type resetTarget struct {
	// where is "earliest", "latest" or "offset".
	where string
	// offset is the offset when where is "offset".
	offset int64
}

func (t resetTarget) String() string {
	if t.where == "offset" {
		return "offset " + strconv.FormatInt(t.offset, 10)
	}
	return t.where
}

// parseResetTarget parses the value of -to: "earliest", "latest", or an
// offset written as decimal digits only (no sign, no spaces), from 0 to
// the largest int64 less one.
func parseResetTarget(s string) (resetTarget, error) {
	switch s {
	case "earliest", "latest":
		return resetTarget{where: s}, nil
	case "":
		return resetTarget{}, errors.New("-to is required: earliest, latest or an offset")
	}
	if strings.TrimLeft(s, "0123456789") != "" {
		return resetTarget{}, fmt.Errorf("-to %q: want earliest, latest or an offset (a number from 0)", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == math.MaxInt64 {
		return resetTarget{}, fmt.Errorf("-to %q: offset too large", s)
	}
	return resetTarget{where: "offset", offset: n}, nil
}

// resetRow is one partition of a reset plan.
type resetRow struct {
	topic     string
	partition int32
	current   int64 // -1: none yet
	next      int64
	logStart  int64
	end       int64
	note      string
}

// runReset runs "shareq reset ...": args are what follows "reset".
func runReset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reset", resetUsage, stderr)
	cluster := addClusterFlags(fs)
	to := fs.String("to", "", "where to move the start offsets: earliest, latest or an offset (required)")
	topic := fs.String("topic", "", "reset only this topic (default: every topic the group has start offsets for)")
	yes := fs.Bool("yes", false, "apply the reset (without it, only show what it would do)")
	pos, err := parseInterspersed(fs, args, 1)
	if err != nil {
		return err
	}
	group := pos[0]
	target, err := parseResetTarget(*to)
	if err != nil {
		return err
	}
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	g, err := describeShareGroup(ctx, adm, group)
	var notFound *groupNotFoundError
	isNew := errors.As(err, &notFound)
	switch {
	case isNew && *topic == "":
		return fmt.Errorf("%w (to give a new share group start offsets, name the topic with -topic)", err)
	case err != nil && !isNew:
		return err
	case len(g.Members) > 0:
		return fmt.Errorf("group %s has %s; stop its workers first", group, plural(len(g.Members), "active member"))
	}

	current := kadm.ShareOffsets{}
	if !isNew {
		d, ok, err := describeOffsets(ctx, adm, group)
		if err != nil {
			return err
		}
		if ok {
			current = d.Offsets
		}
	}
	topics := []string{*topic}
	if *topic == "" {
		topics = slices.Sorted(maps.Keys(current))
		if len(topics) == 0 {
			return fmt.Errorf("share group %s has no start offsets yet (it has never fetched); name the topic with -topic", group)
		}
	}

	rows, err := resetPlan(ctx, adm, topics, current, target)
	if err != nil {
		return err
	}
	w := &errWriter{w: stdout}
	verb := "would reset"
	if *yes {
		verb = "resetting"
	}
	w.printf("share group %s: %s the start offsets of %s to %s\n\n", group, verb, plural(len(rows), "partition"), target)
	notes := slices.ContainsFunc(rows, func(r resetRow) bool { return r.note != "" })
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "TOPIC\tPARTITION\tSTART OFFSET\tNEW START OFFSET\tLOG START\tHIGH WATERMARK"
	if notes {
		header += "\tNOTE"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cur := "-"
		if r.current >= 0 {
			cur = strconv.FormatInt(r.current, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d", r.topic, r.partition, cur, r.next, r.logStart, r.end)
		if notes {
			fmt.Fprintf(tw, "\t%s", r.note)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if w.err != nil {
		return w.err
	}
	if !*yes {
		return errNotConfirmed
	}

	offsets := kadm.Offsets{}
	for _, r := range rows {
		offsets.Add(kadm.Offset{Topic: r.topic, Partition: r.partition, At: r.next})
	}
	var resp kadm.AlterShareGroupOffsetsResponses
	err = untilCoordinatorReady(ctx, func() (err error) {
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
	w.printf("\nreset %s of share group %s to %s\n", plural(len(rows), "partition"), group, target)
	return w.err
}

// resetPlan resolves target for every partition of topics.
func resetPlan(ctx context.Context, adm *kadm.Client, topics []string, current kadm.ShareOffsets, target resetTarget) ([]resetRow, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", strings.Join(topics, ", "), err)
	}
	var rows []resetRow
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
			r := resetRow{topic: t, partition: p, current: -1, logStart: start.Offset, end: end.Offset}
			if o, ok := current.Lookup(t, p); ok && o.Err == nil && o.StartOffset >= 0 {
				r.current = o.StartOffset
			}
			switch target.where {
			case "earliest":
				r.next = r.logStart
			case "latest":
				r.next = r.end
			default:
				r.next = target.offset
				if r.next < r.logStart {
					r.next, r.note = r.logStart, fmt.Sprintf("%d is before the log start", target.offset)
				} else if r.next > r.end {
					r.next, r.note = r.end, fmt.Sprintf("%d is past the end", target.offset)
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
