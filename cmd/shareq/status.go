package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/internal/sharegroup"
)

const statusUsage = `usage: shareq status GROUP [flags]

Shows the share group GROUP: its state, its members and, per partition the
group has state for or is assigned, where it stands.

  MEMBER ID       the member's ID
  CLIENT ID       the client ID the member connected with; a shareq worker
                  is one member, named shareq-<host>-<pid> unless its
                  ClientOpts set another
  STATE           joined: the member works on the group's latest
                  assignment; joining: it has not yet taken it up (it just
                  joined, or the assignment just changed); a member the
                  coordinator fenced is gone from the list until it rejoins
  HOST            the member's address as the broker sees it
  ASSIGNED        topic:partitions the member fetches from (several members
                  may share a partition)

  START OFFSET    the share-partition start offset: every record before it
                  is done (accepted, rejected or archived); "-" when the
                  group has not fetched from the partition yet, or Apache
                  Kafka has not written its share state yet
  LAG             records up to HIGH WATERMARK that are not done yet: those
                  waiting and those in flight (locked by a member); "-"
                  (unknown) without a start offset, or when the broker does
                  not report it (Kafka before 4.2)
  HIGH WATERMARK  the partition's end: the offset the next record gets
  IN LOG          for a partition without a start offset: its records from
                  the log start to HIGH WATERMARK (the column shows only
                  when some partition has no start offset)

"total lag" sums the lags when every one is known. When a partition's lag
is unknown it is never counted as 0: the total reads "≥ N", N being the
known lags plus, with share.auto.offset.reset=earliest, the records in the
logs of the partitions not started (all of them are delivered), or
"unknown" when nothing is known; "not started" then says how many
partitions have no start offset, what their logs hold and what the group's
share.auto.offset.reset makes of it. With -json, total_lag is null then,
lag_at_least holds N, and each such partition has log_start_offset and,
with earliest, waiting.

The admin API does not say how many records are in flight (locked by a
member right now): lag counts them with the ones still waiting.

Apache Kafka reports the start offset it last wrote to the group's share
state, which can trail the records already done until it next writes that
partition's state (on the next acknowledgement or lock expiry); the lag
counts those records as done all the same.

Flags may come before or after GROUP.
`

// runStatus runs "shareq status ...": args are what follows "status".
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusUsage, stderr)
	cluster := addClusterFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	pos, err := parseInterspersed(fs, args, 1)
	if err != nil {
		return err
	}
	group := pos[0]
	cl, err := connect(ctx, cluster)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	g, err := sharegroup.Describe(ctx, adm, group)
	if err != nil {
		return err
	}
	st, err := sharegroup.Gather(ctx, cl, g)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStatus(stdout, st)
}

// newFlagSet returns a flag set for "shareq name" that prints usage and
// the flags on -h.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("shareq "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nflags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// parseInterspersed parses args with flags and positional arguments in any
// order ("--" ends the flags) and checks that there are want positional
// arguments (any number when want is negative).
func parseInterspersed(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if want >= 0 && len(pos) != want {
		fmt.Fprintf(fs.Output(), "%s: want %d argument(s), got %d %q\n\n", fs.Name(), want, len(pos), pos)
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}

// status is what "shareq status" shows; it is also the -json shape.
type status = sharegroup.Status

type partitionStatus = sharegroup.Partition

// printStatus prints st as the tables "shareq status" shows.
func printStatus(w io.Writer, st *status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "group\t%s\n", st.Group)
	fmt.Fprintf(tw, "state\t%s\n", st.State)
	fmt.Fprintf(tw, "coordinator\t%d\n", st.Coordinator)
	fmt.Fprintf(tw, "members\t%d\n", len(st.Members))
	fmt.Fprintf(tw, "total lag\t%s\n", st.LagText())
	if t := st.NotStartedText(); t != "" {
		fmt.Fprintf(tw, "not started\t%s\n", t)
	}
	if t := st.ErrorsText(); t != "" {
		fmt.Fprintf(tw, "errors\t%s\n", t)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(st.Members) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "MEMBER ID\tCLIENT ID\tHOST\tSTATE\tASSIGNED")
		for _, m := range st.Members {
			var as []string
			for _, a := range m.Assigned {
				ps := make([]string, len(a.Partitions))
				for i, p := range a.Partitions {
					ps[i] = strconv.Itoa(int(p))
				}
				as = append(as, a.Topic+":"+strings.Join(ps, ","))
			}
			assigned := strings.Join(as, " ")
			if assigned == "" {
				assigned = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, orDash(m.ClientID), orDash(m.Host), m.State, assigned)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w)
	if len(st.Partitions) == 0 {
		_, err := fmt.Fprintln(w, "no partitions: the group has not fetched yet and has no members")
		return err
	}
	errCol := slices.ContainsFunc(st.Partitions, func(p partitionStatus) bool { return p.Error != "" })
	inLogCol := st.NoStartOffset > 0
	header := "TOPIC\tPARTITION\tSTART OFFSET\tLAG\tHIGH WATERMARK"
	if inLogCol {
		header += "\tIN LOG"
	}
	if errCol {
		header += "\tERROR"
	}
	fmt.Fprintln(tw, header)
	for _, p := range st.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s", p.Topic, p.Partition, optInt(p.StartOffset), optInt(p.Lag), optInt(p.HighWatermark))
		if inLogCol {
			fmt.Fprintf(tw, "\t%s", optInt(p.InLog()))
		}
		if errCol {
			fmt.Fprintf(tw, "\t%s", p.Error)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
