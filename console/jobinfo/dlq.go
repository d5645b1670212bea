package jobinfo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
)

// ParkedLimit caps the DLQ records of one job that [FindParked] returns
// per DLQ topic.
const ParkedLimit = 20

// IsDLQTopic reports whether topic is named as a DLQ topic: it ends with
// dlq.TopicSuffix (the worker's default DLQ topics) or starts with
// "dlq.".
func IsDLQTopic(topic string) bool {
	return strings.HasSuffix(topic, dlq.TopicSuffix) || strings.HasPrefix(topic, "dlq.")
}

// DLQTopics returns the cluster's DLQ topics ([IsDLQTopic]), sorted.
func DLQTopics(ctx context.Context, adm *kadm.Client) ([]string, error) {
	details, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the topics: %w", err)
	}
	var out []string
	for _, t := range details.Names() {
		if IsDLQTopic(t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ScanLimitDefault is the default scan limit of [FindParked]: the
// records of each DLQ topic it reads, newest first, looking for a job.
const ScanLimitDefault = 20000

// Search is how far [FindParked] searched one DLQ topic.
type Search struct {
	Topic string
	// Scanned is the records it read, the newest of each partition.
	Scanned int64
	// Partial reports that it stopped at its scan limit, short of the
	// topic's oldest records: the job can be parked in those.
	Partial bool
}

// NotSearched says what the search of s left out, "" when it read the
// whole topic: "searched the newest N records of T; older ones not
// searched".
func (s *Search) NotSearched() string {
	if !s.Partial {
		return ""
	}
	return fmt.Sprintf("searched the newest %d records of %s; older ones not searched", s.Scanned, s.Topic)
}

// Names returns the topics of ss, in order.
func Names(ss []Search) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Topic
	}
	return out
}

// FindParked returns the records of the job id in the DLQ topics topics
// (dlq.Filter.JobID: the job's ID, or its source record's
// "topic/partition/offset"), at most [ParkedLimit] of each, the newest,
// with their replays, and how far it searched each topic. It reads each
// topic newest first (dlq.ListBackward) and stops after scanLimit records
// of it, shared evenly among its partitions (at least one each);
// scanLimit <= 0 reads each topic whole. cl must consume nothing, as for
// dlq.List, and no other List, Get or Replay may use it meanwhile.
func FindParked(ctx context.Context, cl *kgo.Client, topics []string, id string, scanLimit int) ([]dlq.Parked, []Search, error) {
	return findParked(ctx, cl, topics, id, scanLimit, false)
}

// FindParkedAll is [FindParked] in every DLQ topic of the cluster
// ([DLQTopics]); it passes over a topic deleted since it was listed.
func FindParkedAll(ctx context.Context, cl *kgo.Client, id string, scanLimit int) ([]dlq.Parked, []Search, error) {
	topics, err := DLQTopics(ctx, kadm.NewClient(cl))
	if err != nil {
		return nil, nil, err
	}
	return findParked(ctx, cl, topics, id, scanLimit, true)
}

func findParked(ctx context.Context, cl *kgo.Client, topics []string, id string, scanLimit int, skipGone bool) ([]dlq.Parked, []Search, error) {
	out, searched := []dlq.Parked{}, []Search{}
	for _, t := range topics {
		ps, s, err := searchTopic(ctx, cl, t, id, scanLimit)
		if skipGone && errors.Is(err, dlq.ErrNoTopic) {
			continue
		}
		if err != nil {
			return out, searched, fmt.Errorf("search the DLQ topic %s: %w", t, err)
		}
		out = append(out, ps...)
		searched = append(searched, s)
	}
	return out, searched, nil
}

// searchTopic is FindParked in one topic: its job's records in
// partition and offset order.
func searchTopic(ctx context.Context, cl *kgo.Client, topic, id string, scanLimit int) ([]dlq.Parked, Search, error) {
	s := Search{Topic: topic}
	perPart := 0
	if scanLimit > 0 {
		n, err := partitions(ctx, cl, topic)
		if err != nil {
			return nil, s, err
		}
		perPart = max(scanLimit/max(n, 1), 1)
	}
	// Every match of the newest perPart records, read in one pass each.
	bs, err := dlq.ListBackward(ctx, cl, topic, dlq.Filter{JobID: id}, nil, 0, perPart)
	if err != nil {
		return nil, s, err
	}
	var ps []dlq.Parked
	for i := range bs {
		b := &bs[i]
		s.Scanned += b.Scanned()
		s.Partial = s.Partial || b.More()
		ps = append(ps, b.Jobs...)
	}
	// The newest ParkedLimit, by parked time, in partition and offset
	// order.
	slices.SortStableFunc(ps, func(a, b dlq.Parked) int { return b.ParkedAt.Compare(a.ParkedAt) })
	ps = ps[:min(len(ps), ParkedLimit)]
	slices.SortFunc(ps, func(a, b dlq.Parked) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	return ps, s, nil
}

// partitions returns the number of partitions of topic.
func partitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return 0, fmt.Errorf("%w: %s", dlq.ErrNoTopic, topic)
	}
	if td.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, td.Err)
	}
	return len(td.Partitions), nil
}
