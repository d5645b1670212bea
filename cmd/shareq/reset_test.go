package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/kafkatest"
)

// consume joins group as a new member, accepts records until it has want
// of them, checks that no more come within a short wait, leaves, and
// returns their values in order of (partition, offset).
func consume(t *testing.T, c *kafkatest.Cluster, group, topic string, want int) []string {
	t.Helper()
	cl := c.ShareConsumer(t, group, []string{topic})
	defer cl.Close()
	type got struct {
		p   int32
		off int64
		v   string
	}
	var recs []got
	deadline := time.Now().Add(30 * time.Second)
	extra := time.Time{}
	for {
		if len(recs) >= want && extra.IsZero() {
			extra = time.Now().Add(1500 * time.Millisecond) // anything more would come now
		}
		stop := deadline
		if !extra.IsZero() {
			stop = extra
		}
		if time.Now().After(stop) {
			break
		}
		ctx, cancel := context.WithDeadline(context.Background(), stop)
		fs := cl.PollFetches(ctx)
		cancel()
		for _, r := range fs.Records() {
			recs = append(recs, got{r.Partition, r.Offset, string(r.Value)})
			r.Ack(kgo.AckAccept)
		}
	}
	if err := cl.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b got) int {
		if a.p != b.p {
			return int(a.p - b.p)
		}
		return int(a.off - b.off)
	})
	vs := make([]string, len(recs))
	for i, r := range recs {
		vs[i] = r.v
	}
	return vs
}

// waitEmpty waits until group has no members.
func waitEmpty(t *testing.T, brokers, group string) {
	t.Helper()
	waitStatus(t, brokers, group, "no members", func(st status) bool { return len(st.Members) == 0 })
}

func values(from, to int) []string {
	var vs []string
	for i := from; i < to; i++ {
		vs = append(vs, fmt.Sprintf("v%d", i))
	}
	return vs
}

func produceValues(t *testing.T, c *kafkatest.Cluster, topic string, from, to int) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range values(from, to) {
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
	}
	c.Produce(t, recs...)
}

func TestResetMovesStartOffsets(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	brokers := strings.Join(c.Seeds, ",")
	produceValues(t, c, topic, 0, 6)
	if got := consume(t, c, group, topic, 6); !slices.Equal(got, values(0, 6)) {
		t.Fatalf("first run consumed %v", got)
	}
	waitEmpty(t, brokers, group)

	// Without -yes: the plan, and nothing changes.
	out, _, err := cli(t, "reset", group, "-brokers", brokers, "--to", "earliest")
	if !errors.Is(err, errNotConfirmed) {
		t.Fatalf("reset without -yes: %v", err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`would reset the start offsets of 1 partition to earliest`),
		regexp.MustCompile(`(?m)^TOPIC\s+PARTITION\s+START OFFSET\s+NEW START OFFSET\s+LOG START\s+HIGH WATERMARK$`),
		regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + `\s+0\s+\d+\s+0\s+0\s+6$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("reset plan does not match %s:\n%s", want, out)
		}
	}
	if got := consume(t, c, group, topic, 0); len(got) != 0 {
		t.Fatalf("after a reset without -yes the group consumed %v", got)
	}
	waitEmpty(t, brokers, group)

	for _, step := range []struct {
		to      string
		produce int // records to produce after the reset
		want    []string
		note    string
	}{
		{to: "earliest", want: values(0, 6)},
		{to: "4", want: values(4, 6)},
		{to: "latest", produce: 1, want: values(6, 7)},
		{to: "2", want: values(2, 7)},
		{to: "100", want: nil, note: "100 is past the end"},
	} {
		out, errOut, err := cli(t, "reset", "-brokers", brokers, "-to", step.to, "-yes", group)
		if err != nil {
			t.Fatalf("reset -to %s: %v\n%s%s", step.to, err, out, errOut)
		}
		if !strings.Contains(out, "reset 1 partition of share group "+group) || !strings.Contains(out, step.note) {
			t.Errorf("reset -to %s output:\n%s", step.to, out)
		}
		if step.produce > 0 {
			produceValues(t, c, topic, 6, 6+step.produce)
		}
		if got := consume(t, c, group, topic, len(step.want)); !slices.Equal(got, step.want) {
			t.Errorf("after reset -to %s the group consumed %v, want %v", step.to, got, step.want)
		}
		waitEmpty(t, brokers, group)
	}
}

func TestResetRefusedWithMembers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	brokers := strings.Join(c.Seeds, ",")
	produceValues(t, c, topic, 0, 2)
	member := c.ShareConsumer(t, group, []string{topic})
	for len(pollAccept(t, member)) == 0 {
	}
	waitStatus(t, brokers, group, "a member", func(st status) bool { return len(st.Members) == 1 })
	for _, yes := range []string{"-yes", "-yes=false"} {
		_, _, err := cli(t, "reset", "-brokers", brokers, "-to", "earliest", yes, group)
		if err == nil || err.Error() != "group "+group+" has 1 active member; stop its workers first" {
			t.Errorf("reset %s of a group with a member: %v", yes, err)
		}
	}
}

func TestResetNewGroupWithTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t) // share.auto.offset.reset=earliest
	brokers := strings.Join(c.Seeds, ",")
	produceValues(t, c, topic, 0, 5)

	_, _, err := cli(t, "reset", "-brokers", brokers, "-to", "3", "-yes", group)
	if err == nil || !strings.Contains(err.Error(), "name the topic with -topic") {
		t.Fatalf("reset of a new group without -topic: %v", err)
	}
	out, errOut, err := cli(t, "reset", "-brokers", brokers, "-to", "3", "-topic", topic, "-yes", group)
	if err != nil {
		t.Fatalf("reset of a new group with -topic: %v\n%s%s", err, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + `\s+0\s+-\s+3\s+0\s+5$`).MatchString(out) {
		t.Errorf("reset plan for a new group:\n%s", out)
	}
	// The start offset wins over share.auto.offset.reset=earliest.
	if got := consume(t, c, group, topic, 2); !slices.Equal(got, values(3, 5)) {
		t.Errorf("a new group reset to 3 consumed %v", got)
	}
}

func TestResetErrors(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	brokers := strings.Join(c.Seeds, ",")
	topic, group := c.Topic(t, 1), c.Group(t)
	produceValues(t, c, topic, 0, 1)
	if got := consume(t, c, group, topic, 1); len(got) != 1 {
		t.Fatalf("consumed %v", got)
	}
	waitEmpty(t, brokers, group)

	consumer := consumerGroup(t, c)
	missing := kafkatest.Name(t, "nope")
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{consumer, "-to", "earliest", "-yes"}, consumer + " is a consumer group, not a share group"},
		{[]string{consumer, "-to", "earliest", "-topic", topic, "-yes"}, consumer + " is a consumer group, not a share group"},
		{[]string{kafkatest.Name(t, "g"), "-to", "earliest"}, "not found (to give a new share group start offsets, name the topic with -topic)"},
		{[]string{group, "-to", "-1"}, `-to "-1": want earliest, latest or an offset`},
		{[]string{group, "-to", "soon"}, `-to "soon": want earliest, latest or an offset`},
		{[]string{group}, "-to is required"},
		{[]string{group, "-to", "earliest", "-topic", missing, "-yes"}, "topic " + missing + " does not exist"},
		{[]string{group, "-to", "earliest", "-brokers", "127.0.0.1:1"}, "cannot reach brokers 127.0.0.1:1: "},
	} {
		args := append([]string{"reset", "-brokers", brokers}, tc.args...)
		if _, _, err := cli(t, args...); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.err)
		}
	}
	if _, errOut, err := cli(t, "reset", "-brokers", brokers, "-to", "earliest"); err != errUsage || !strings.Contains(errOut, "usage: shareq reset GROUP") {
		t.Errorf("reset without a group: %v\n%s", err, errOut)
	}
	if _, errOut, err := cli(t, "reset", "-h"); err == nil || !strings.Contains(errOut, "share.auto.offset.reset") {
		t.Errorf("reset -h: %v\n%s", err, errOut)
	}
	// The failed attempts changed nothing.
	if got := consume(t, c, group, topic, 0); len(got) != 0 {
		t.Errorf("consumed %v after failed resets", got)
	}
}
