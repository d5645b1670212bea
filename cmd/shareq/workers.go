package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shareq/shareq/internal/fleet"
)

const workersUsage = `usage: shareq workers [flags]

Lists the shareq workers running now, from the status topic each worker
publishes to (` + fleet.TopicDefault + ` unless -topic names another; created by
"shareq topics create -workers"): every few seconds, within a second of a
change, and a tombstone when it stops gracefully, which takes it off the
list at once. A worker that crashed leaves the list when its last status
is 3 of its intervals old (15 s by default: worker.StatusEvery).

  NAME      the worker's Kafka client ID (shareq-<host>-<pid> unless its
            ClientOpts set another), as shareq status shows it per member
  HOST      the host it runs on
  VERSION   the shareq module it was built with ("(devel)": from a checkout)
  GROUP     its share group
  TOPICS    the topics it handles
  STATE     its member's: joining, joined, fenced (rejoining), left
  CONC      its concurrency (handler slots)
  RUNNING   handlers running
  HELD      records it holds: acquired and not yet acknowledged
  WAITING   jobs waiting for their keys' limits or breakers
  SNOOZED   snoozed jobs held until due
  BREAKERS  keys whose breaker is open
  RATE      its topic's rate limit in force for the group (worker.TopicRate,
            or one set with shareq limit) and its share, jobs a second
  DOWN      the dependencies it is paused for (handler.Unavailable)
  SEEN      how long ago it last published

With -json it prints the statuses as published, with last_seen.

`

// runWorkers runs "shareq workers ...": args are what follows "workers".
func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("workers", workersUsage, stderr)
	cluster := addClusterFlags(fs)
	topic := fs.String("topic", fleet.TopicDefault, "the workers' status topic")
	group := fs.String("group", "", "list only the workers of this share group")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := parseInterspersed(fs, args, 0); err != nil {
		return err
	}
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	now := time.Now()
	ws, err := fleet.Read(ctx, cl, *topic, now)
	if err != nil {
		return err
	}
	if *group != "" {
		ws = fleet.OfGroup(ws, *group)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ws)
	}
	if len(ws) == 0 {
		fmt.Fprintf(stdout, "no workers: none has a status in %s that is not stale (a worker publishes only when the topic existed at its start or within a minute since)\n", *topic)
		return nil
	}
	return printWorkers(stdout, ws, now)
}

func printWorkers(w io.Writer, ws []fleet.Status, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHOST\tVERSION\tGROUP\tTOPICS\tSTATE\tCONC\tRUNNING\tHELD\tWAITING\tSNOOZED\tBREAKERS\tDOWN\tPAUSED\tSEEN")
	for _, s := range ws {
		down := strings.Join(s.DependenciesDown, ",")
		if down == "" {
			down = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s ago\n",
			s.Name, s.Host, s.Version, s.Group, strings.Join(s.Topics, ","), s.State, s.Concurrency,
			s.Running, s.Held, s.Waiting, s.Snoozed, s.BreakersOpen, s.RateText(), down, pausedList(s.Paused), fleet.Age(s, now))
	}
	return tw.Flush()
}

// pausedList is a worker's paused topics as "topic (by)", or "-".
func pausedList(ps []fleet.PausedTopic) string {
	if len(ps) == 0 {
		return "-"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Topic + " (" + p.By + ")"
	}
	return strings.Join(out, ",")
}
