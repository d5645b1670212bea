package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/internal/sharegroup"
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
	target, err := sharegroup.ParseTarget(*to)
	if err != nil {
		return err
	}
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	rows, err := sharegroup.PlanReset(ctx, adm, group, *topic, target)
	if err != nil {
		return err
	}
	w := &errWriter{w: stdout}
	verb := "would reset"
	if *yes {
		verb = "resetting"
	}
	w.printf("share group %s: %s the start offsets of %s to %s\n\n", group, verb, plural(len(rows), "partition"), target)
	notes := slices.ContainsFunc(rows, func(r sharegroup.Row) bool { return r.Note != "" })
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := "TOPIC\tPARTITION\tSTART OFFSET\tNEW START OFFSET\tLOG START\tHIGH WATERMARK"
	if notes {
		header += "\tNOTE"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cur := "-"
		if r.Current >= 0 {
			cur = strconv.FormatInt(r.Current, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d", r.Topic, r.Partition, cur, r.Next, r.LogStart, r.End)
		if notes {
			fmt.Fprintf(tw, "\t%s", r.Note)
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

	if err := sharegroup.Apply(ctx, adm, group, rows); err != nil {
		return err
	}
	w.printf("\nreset %s of share group %s to %s\n", plural(len(rows), "partition"), group, target)
	return w.err
}
