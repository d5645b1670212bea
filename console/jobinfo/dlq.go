package jobinfo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
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

// FindParked returns the records of the job id in the DLQ topics topics
// (dlq.Filter.JobID: the job's ID, or its source record's
// "topic/partition/offset"), at most [ParkedLimit] of each, with their
// replays; it reads each topic whole. cl must consume nothing, as for
// dlq.List, and no other List, Get or Replay may use it meanwhile.
func FindParked(ctx context.Context, cl *kgo.Client, topics []string, id string) ([]dlq.Parked, error) {
	return findParked(ctx, cl, topics, id, false)
}

// FindParkedAll is [FindParked] in every DLQ topic of the cluster
// ([DLQTopics]); it returns the topics it searched, and passes over one
// deleted since it was listed.
func FindParkedAll(ctx context.Context, cl *kgo.Client, id string) ([]dlq.Parked, []string, error) {
	topics, err := DLQTopics(ctx, kadm.NewClient(cl))
	if err != nil {
		return nil, nil, err
	}
	ps, err := findParked(ctx, cl, topics, id, true)
	return ps, topics, err
}

func findParked(ctx context.Context, cl *kgo.Client, topics []string, id string, skipGone bool) ([]dlq.Parked, error) {
	var out []dlq.Parked
	for _, t := range topics {
		ps, err := dlq.List(ctx, cl, t, dlq.Filter{JobID: id}, ParkedLimit)
		if skipGone && errors.Is(err, dlq.ErrNoTopic) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("search the DLQ topic %s: %w", t, err)
		}
		out = append(out, ps...)
	}
	return out, nil
}
