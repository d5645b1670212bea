package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
                  group has not fetched from the partition yet
  LAG             records up to HIGH WATERMARK that are not done yet: those
                  waiting and those in flight (locked by a member); "-" when
                  the broker does not report it (Kafka before 4.2)
  HIGH WATERMARK  the partition's end: the offset the next record gets

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

	g, err := describeShareGroup(ctx, adm, group)
	if err != nil {
		return err
	}
	st, err := groupStatus(ctx, adm, g)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return st.print(stdout)
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

// groupNotFoundError: no group of any type has the name.
type groupNotFoundError struct{ group string }

func (e *groupNotFoundError) Error() string { return "share group " + e.group + " not found" }

// describeShareGroup describes group, which must be a share group. A
// group that does not exist is a *groupNotFoundError; a group of another
// type (a consumer group) is an error that says so.
func describeShareGroup(ctx context.Context, adm *kadm.Client, group string) (kadm.DescribedShareGroup, error) {
	var (
		g  kadm.DescribedShareGroup
		ok bool
	)
	err := untilCoordinatorReady(ctx, func() error {
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
		return g, &groupNotFoundError{group}
	}
	return g, fmt.Errorf("describe share group %s: %w", group, g.Err)
}

// describeOffsets describes the share group's start offsets and lags; ok
// is false when the broker has no answer for the group.
func describeOffsets(ctx context.Context, adm *kadm.Client, group string) (d kadm.DescribedShareGroupOffsets, ok bool, err error) {
	err = untilCoordinatorReady(ctx, func() error {
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
type status struct {
	Group       string `json:"group"`
	State       string `json:"state"`
	Coordinator int32  `json:"coordinator"`
	GroupEpoch  int32  `json:"group_epoch"`
	// TotalLag sums the known lags; partitions the group has not started
	// on (no start offset) are not counted, and NoStartOffset counts them.
	TotalLag      int64             `json:"total_lag"`
	NoStartOffset int               `json:"partitions_without_start_offset"`
	Members       []memberStatus    `json:"members"`
	Partitions    []partitionStatus `json:"partitions"`
}

type memberStatus struct {
	MemberID string            `json:"member_id"`
	ClientID string            `json:"client_id"`
	Host     string            `json:"host"`
	Epoch    int32             `json:"member_epoch"`
	State    string            `json:"state"` // joined or joining`
	Assigned []topicPartitions `json:"assigned"`
}

type topicPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// partitionStatus is one partition's standing; null fields are unknown.
//
// There is no in-flight count: DescribeShareGroupOffsets (KIP-932,
// KIP-1226) reports only the start offset and the lag, and the in-flight
// state lives in the partition leader (ReadShareGroupState is an
// inter-broker API). Lag includes in-flight records.
type partitionStatus struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	StartOffset   *int64 `json:"start_offset"`
	Lag           *int64 `json:"lag"`
	HighWatermark *int64 `json:"high_watermark"`
	Error         string `json:"error,omitempty"`
}

// groupStatus gathers the offsets of g's partitions: those it has share
// state for and those assigned to its members.
func groupStatus(ctx context.Context, adm *kadm.Client, g kadm.DescribedShareGroup) (*status, error) {
	st := &status{
		Group: g.GroupID, State: g.GroupState, Coordinator: g.Coordinator.NodeID, GroupEpoch: g.GroupEpoch,
		Members: []memberStatus{}, Partitions: []partitionStatus{},
	}
	type tp struct {
		topic     string
		partition int32
	}
	parts := map[tp]*partitionStatus{}
	add := func(topic string, p int32) *partitionStatus {
		k := tp{topic, p}
		if parts[k] == nil {
			parts[k] = &partitionStatus{Topic: topic, Partition: p}
		}
		return parts[k]
	}
	for _, m := range g.Members {
		ms := memberStatus{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Epoch: m.MemberEpoch, State: "joined", Assigned: []topicPartitions{}}
		if m.MemberEpoch < g.AssignmentEpoch {
			ms.State = "joining"
		}
		for _, t := range m.Assignment.Sorted() {
			ms.Assigned = append(ms.Assigned, topicPartitions{Topic: t.Topic, Partitions: t.Partitions})
			for _, p := range t.Partitions {
				add(t.Topic, p)
			}
		}
		st.Members = append(st.Members, ms)
	}

	d, ok, err := describeOffsets(ctx, adm, g.GroupID)
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
	slices.SortFunc(st.Partitions, func(a, b partitionStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return st, nil
}

func (st *status) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "group\t%s\n", st.Group)
	fmt.Fprintf(tw, "state\t%s\n", st.State)
	fmt.Fprintf(tw, "coordinator\t%d\n", st.Coordinator)
	fmt.Fprintf(tw, "members\t%d\n", len(st.Members))
	fmt.Fprintf(tw, "total lag\t%d", st.TotalLag)
	if st.NoStartOffset > 0 {
		fmt.Fprintf(tw, " (%s not started: no start offset yet)", plural(st.NoStartOffset, "partition"))
	}
	fmt.Fprintln(tw)
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
	header := "TOPIC\tPARTITION\tSTART OFFSET\tLAG\tHIGH WATERMARK"
	if errCol {
		header += "\tERROR"
	}
	fmt.Fprintln(tw, header)
	for _, p := range st.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s", p.Topic, p.Partition, optInt(p.StartOffset), optInt(p.Lag), optInt(p.HighWatermark))
		if errCol {
			fmt.Fprintf(tw, "\t%s", p.Error)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func ptr[T any](v T) *T { return &v }

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
