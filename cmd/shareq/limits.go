package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/shareq/shareq/control"
)

const limitUsage = `usage: shareq limit GROUP -topic TOPIC [-rate N/s] [-key-concurrency N] [-key-rate N/s] -reason TEXT
       shareq limit GROUP -topic TOPIC -clear

Changes, without a restart, the limits the workers of GROUP declare in
code for TOPIC: -rate its worker.TopicRate (jobs per interval, across
every worker of the group: 14/s, 600/m, 100/10s), -key-concurrency and
-key-rate its worker.KeyLimit's Concurrency and Rate per key (per worker;
-key-concurrency 0 lifts the limit). A rate takes effect on every worker
at the same moment, half a second after the command; key limits as each
worker reads them, within a second. A worker whose code declares no such
limit for the topic ignores that part and says so once in its log.

A new limit replaces the topic's earlier one as a whole: a flag left out
goes back to the code's value. -clear goes back to the code's limits.
"shareq limits" lists what is set; "shareq workers" shows each worker's
rate in force.

The limit is a record in the control topic (` + control.DefaultTopic + ` unless
-controls-topic names another), created when missing. It needs Write on
that topic (and Create when it is missing).
`

const limitsUsage = `usage: shareq limits [-group GROUP] [-json]

Lists the limits set at run time (shareq limit): group, topic, rate, key
concurrency and key rate ("code": the code's value), who set them, when,
and why. It needs Read on the control topic.
`

// runLimit runs "shareq limit ...": args are what follows "limit".
func runLimit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("limit", limitUsage, stderr)
	ctlFlags := addControlFlags(fs, addClusterFlags(fs))
	topic := fs.String("topic", "", "the limited topic (required)")
	rate := fs.String("rate", "", "the topic's rate across the group, N/s, N/m, N/h or N/DURATION (worker.TopicRate)")
	keyConc := fs.Int("key-concurrency", -1, "jobs of one key at once, per worker (worker.KeyLimit's Concurrency); 0: no limit")
	keyRate := fs.String("key-rate", "", "jobs of one key per interval, per worker, N/s… (worker.KeyLimit's Rate and Per)")
	reason := fs.String("reason", "", "why, shown wherever the limit is (required unless -clear)")
	by := fs.String("by", defaultBy(), "who sets it")
	clearIt := fs.Bool("clear", false, "go back to the limits the code declares")
	pos, err := parseInterspersed(fs, args, 1)
	if err != nil {
		return err
	}
	if *topic == "" {
		return errors.New("-topic is required: limits are set per topic")
	}
	l, err := limitOf(fs, pos[0], *topic, *rate, *keyConc, *keyRate, *reason, *by, *clearIt)
	if err != nil {
		return err
	}
	cl, ctl, err := ctlFlags.open(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if *clearIt {
		if err := ctl.ClearLimit(ctx, pos[0], *topic); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "group %s topic %s: back to the limits its workers' code declares\n", pos[0], *topic)
		return nil
	}
	if err := ctl.EnsureTopic(ctx); err != nil {
		return err
	}
	if err := ctl.SetLimit(ctx, l); err != nil {
		return err
	}
	fmt.Fprintln(stdout, l)
	return nil
}

// limitOf is the limit the flags describe; with -clear, none may be set.
func limitOf(fs *flag.FlagSet, group, topic, rate string, keyConc int, keyRate, reason, by string, clearIt bool) (control.Limit, error) {
	l := control.Limit{Group: group, Topic: topic, Reason: reason, By: by, At: time.Now()}
	if clearIt {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "rate", "key-concurrency", "key-rate", "reason":
				set = append(set, "-"+f.Name)
			}
		})
		if len(set) > 0 {
			return l, fmt.Errorf("-clear goes back to the code's limits: drop %v", set)
		}
		return l, nil
	}
	if rate != "" {
		r, err := control.ParseRate(rate)
		if err != nil {
			return l, fmt.Errorf("-rate: %w", err)
		}
		l.Rate = &r
	}
	if keyRate != "" {
		r, err := control.ParseRate(keyRate)
		if err != nil {
			return l, fmt.Errorf("-key-rate: %w", err)
		}
		l.KeyRate = &r
	}
	switch {
	case keyConc >= 0:
		l.KeyConcurrency = &keyConc
	case keyConc != -1:
		return l, fmt.Errorf("-key-concurrency %d: want 0 (no limit) or more", keyConc)
	}
	if l.Rate == nil && l.KeyRate == nil && l.KeyConcurrency == nil {
		return l, errors.New("give -rate, -key-concurrency or -key-rate (or -clear to go back to the code's limits)")
	}
	if reason == "" {
		return l, errors.New("-reason is required: say why, for whoever finds the limit (shareq limits, the workers' logs, the console)")
	}
	return l, nil
}

// runLimits runs "shareq limits ...": args are what follows "limits".
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return listControl(ctx, "limits", limitsUsage, args, stdout, stderr,
		"no limits set at run time: every worker runs the limits its code declares",
		func(st control.State, group string) []control.Limit {
			if group == "" {
				return st.Limits
			}
			return st.LimitsOf(group)
		},
		func(tw io.Writer, ls []control.Limit, now time.Time) {
			fmt.Fprintln(tw, "GROUP\tTOPIC\tRATE\tKEY CONC\tKEY RATE\tBY\tSINCE\tREASON")
			for _, l := range ls {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", l.Group, l.Topic, rateText(l.Rate), concText(l.KeyConcurrency),
					rateText(l.KeyRate), l.By, now.Sub(l.At).Round(time.Second), l.Reason)
			}
		})
}

// rateText is r for the table: "code" when the limit leaves it to the
// code.
func rateText(r *control.Rate) string {
	if r == nil {
		return "code"
	}
	return r.String()
}

// concText is a key concurrency for the table.
func concText(n *int) string {
	switch {
	case n == nil:
		return "code"
	case *n == 0:
		return "none"
	}
	return fmt.Sprint(*n)
}
