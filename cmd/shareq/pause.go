package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
)

const pauseUsage = `usage: shareq pause GROUP [-topic TOPIC] -reason TEXT [-by WHO]

Pauses TOPIC for the share group GROUP, or with no -topic every topic of
GROUP: each worker of the group stops fetching the topic's records and
starting its jobs within a second, wherever it runs, and stays paused
across worker and broker restarts (a worker started while the pause is on
starts paused) until "shareq resume". Jobs running finish; jobs a worker
holds and has not started wait, their locks renewed, and run on resume (a
job still waiting at the worker's MaxHold is copied for later, not
released: no delivery is spent). The reason and who paused show in
"shareq pauses", "shareq workers" and the console.

The pause is a record in the control topic (` + control.DefaultTopic + ` unless
-controls-topic names another), which this command creates when it is
missing. It needs Write on that topic (and Create when it is missing).
`

const resumeUsage = `usage: shareq resume GROUP [-topic TOPIC]

Ends the pause of TOPIC for GROUP (with no -topic, the pause of the whole
group): its workers fetch and start its jobs again within a second, the
jobs they held first. A topic paused on its own and with its whole group
runs again when both pauses are resumed. Resuming what is not paused is no
error. It needs Write on the control topic.
`

const pausesUsage = `usage: shareq pauses [-group GROUP] [-json]

Lists the pauses in force: group, topic ("*" for the whole group), who
paused, when, and why. It needs Describe and Read on the control topic.
`

// controlFlags are the flags every control command takes.
type controlFlags struct {
	cluster *clusterFlags
	topic   *string
}

func addControlFlags(fs *flag.FlagSet, cluster *clusterFlags) controlFlags {
	return controlFlags{cluster: cluster, topic: fs.String("controls-topic", control.DefaultTopic, "the control topic workers follow (worker.ControlTopic)")}
}

// open connects and returns the control client; close the kgo client
// when done.
func (f controlFlags) open(ctx context.Context) (*kgo.Client, *control.Client, error) {
	cl, err := connect(ctx, f.cluster)
	if err != nil {
		return nil, nil, err
	}
	ctl, err := control.New(cl, control.Topic(*f.topic))
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, ctl, nil
}

// runPause runs "shareq pause ...": args are what follows "pause".
func runPause(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pause", pauseUsage, stderr)
	ctlFlags := addControlFlags(fs, addClusterFlags(fs))
	topic := fs.String("topic", "", "the topic to pause; none: every topic of GROUP")
	reason := fs.String("reason", "", "why, shown wherever the pause is (required)")
	by := fs.String("by", defaultBy(), "who pauses")
	pos, err := parseInterspersed(fs, args, 1)
	if err != nil {
		return err
	}
	if *reason == "" {
		return errors.New("-reason is required: say why, for whoever finds the pause (shareq pauses, the console, the workers' logs)")
	}
	cl, ctl, err := ctlFlags.open(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := ctl.EnsureTopic(ctx); err != nil {
		return err
	}
	p := control.Pause{Group: pos[0], Topic: *topic, Reason: *reason, By: *by, At: time.Now()}
	if err := ctl.Pause(ctx, p); err != nil {
		return err
	}
	fmt.Fprintln(stdout, p)
	return nil
}

// runResume runs "shareq resume ...": args are what follows "resume".
func runResume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("resume", resumeUsage, stderr)
	ctlFlags := addControlFlags(fs, addClusterFlags(fs))
	topic := fs.String("topic", "", "the topic to resume; none: the whole group's pause")
	pos, err := parseInterspersed(fs, args, 1)
	if err != nil {
		return err
	}
	cl, ctl, err := ctlFlags.open(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	what := "group " + pos[0]
	if *topic != "" {
		what += " topic " + *topic
	}
	st, err := ctl.Read(ctx)
	if errors.Is(err, control.ErrNoTopic) {
		// Nothing was ever paused on this cluster: no control topic to
		// write the resume to, and none needed.
		fmt.Fprintf(stdout, "%s was not paused (no control topic %s: nothing was ever paused)\n", what, ctl.Topic())
		return nil
	}
	if err != nil {
		return err
	}
	if err := ctl.Resume(ctx, pos[0], *topic); err != nil {
		return err
	}
	if _, was := pausedExactly(st, pos[0], *topic); !was {
		fmt.Fprintf(stdout, "%s was not paused\n", what)
	} else {
		fmt.Fprintf(stdout, "%s resumed\n", what)
	}
	if *topic != "" {
		if p, ok := st.Paused(pos[0], *topic); ok && p.Whole() {
			fmt.Fprintf(stdout, "still paused with its whole group (%s); resume it with: shareq resume %s\n", p, pos[0])
		}
	}
	return nil
}

// pausedExactly returns the pause of exactly group and topic ("" the
// whole group's), not one that covers it.
func pausedExactly(st control.State, group, topic string) (control.Pause, bool) {
	for _, p := range st.Pauses {
		if p.Group == group && p.Topic == topic {
			return p, true
		}
	}
	return control.Pause{}, false
}

// runPauses runs "shareq pauses ...": args are what follows "pauses".
func runPauses(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return listControl(ctx, "pauses", pausesUsage, args, stdout, stderr, "nothing is paused",
		func(st control.State, group string) []control.Pause {
			if group == "" {
				return st.Pauses
			}
			return st.Of(group)
		},
		func(tw io.Writer, ps []control.Pause, now time.Time) {
			fmt.Fprintln(tw, "GROUP\tTOPIC\tBY\tSINCE\tREASON")
			for _, p := range ps {
				topic := p.Topic
				if p.Whole() {
					topic = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\n", p.Group, topic, p.By, now.Sub(p.At).Round(time.Second), p.Reason)
			}
		})
}

// listControl runs a command that lists what the control topic holds
// ("shareq pauses", "shareq limits"): pick takes the entries, of -group
// when given; they print as JSON with -json, else as the table or the
// empty line. A missing control topic holds nothing.
func listControl[T any](ctx context.Context, name, usage string, args []string, stdout, stderr io.Writer, empty string,
	pick func(st control.State, group string) []T, table func(tw io.Writer, items []T, now time.Time)) error {
	fs := newFlagSet(name, usage, stderr)
	ctlFlags := addControlFlags(fs, addClusterFlags(fs))
	group := fs.String("group", "", "list only this share group's entries")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := parseInterspersed(fs, args, 0); err != nil {
		return err
	}
	cl, ctl, err := ctlFlags.open(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := ctl.Read(ctx)
	if errors.Is(err, control.ErrNoTopic) {
		st, err = control.State{}, nil // nothing was ever written
	}
	if err != nil {
		return err
	}
	items := pick(st, *group)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if items == nil {
			items = []T{}
		}
		return enc.Encode(items)
	}
	if len(items) == 0 {
		fmt.Fprintln(stdout, empty)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	table(tw, items, time.Now())
	return tw.Flush()
}

// defaultBy is who pauses unless -by says: user@host.
func defaultBy() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}
