package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/acl"
)

// ErrNoTopic is returned by [Read] when the status topic does not exist:
// no worker can publish, so none is listed.
var ErrNoTopic = errors.New("fleet: the workers' status topic does not exist")

// noTopic is ErrNoTopic for topic, with the command that creates it.
func noTopic(topic string) error {
	flag := ""
	if topic != TopicDefault {
		flag = " -workers-topic " + topic
	}
	return fmt.Errorf("%w: %s (no worker can publish its status; create it with: shareq topics create -workers%s)", ErrNoTopic, topic, flag)
}

// Read returns the workers listed in the status topic at now: the last
// status of each instance, without those that left (a tombstone) and
// those whose status is stale ([Status.Stale]), sorted by group, name and
// instance. It reads the records of the last [ReadWindow] through a
// short-lived client made from cl's options (cl.Opts()), so cl must
// consume nothing (no ConsumeTopics, no group); Read does not close it.
func Read(ctx context.Context, cl *kgo.Client, topic string, now time.Time) ([]Status, error) {
	from, to, err := readRange(ctx, kadm.NewClient(cl), topic, now.Add(-ReadWindow))
	if err != nil {
		return nil, err
	}
	if len(from) == 0 {
		// Nothing to fetch, so no fetch to be refused: ask whether the
		// client may read at all, or a reader without Read would list
		// no workers instead of saying what it lacks.
		if err := mayRead(ctx, cl, topic); err != nil {
			return nil, err
		}
		return []Status{}, nil
	}
	last := map[string]*Status{}
	if err := readRecords(ctx, cl, topic, from, to, func(r *kgo.Record) {
		key := string(r.Key)
		if r.Value == nil {
			delete(last, key)
			return
		}
		s, err := decode(r.Value)
		if err != nil {
			return // not a status: another writer's record; skip it
		}
		s.LastSeen = r.Timestamp
		last[key] = s
	}); err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(last))
	for _, s := range last {
		if !s.Stale(now) {
			out = append(out, *s)
		}
	}
	slices.SortFunc(out, func(a, b Status) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Instance, b.Instance))
	})
	return out, nil
}

// readRange returns, per partition of topic with records since, the
// offset of the first record at or after since and the end offset.
func readRange(ctx context.Context, adm *kadm.Client, topic string, since time.Time) (from, to map[int32]int64, err error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, topicErr("Describe", topic, err)
	}
	if _, ok := ends[topic]; !ok {
		return nil, nil, noTopic(topic)
	}
	starts, err := adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, topicErr("Describe", topic, err)
	}
	from, to = map[int32]int64{}, map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(topic, e.Partition)
		if !ok || s.Offset < 0 || s.Offset >= e.Offset {
			return // nothing since
		}
		from[e.Partition], to[e.Partition] = s.Offset, e.Offset
	})
	return from, to, nil
}

// mayRead returns an error naming Read when the broker says that cl may
// not read topic (the topic's authorized operations), and nil when it may
// or the broker does not say.
func mayRead(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("fleet: read %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return topicErr("Describe", topic, err)
		}
		if !acl.Allows(t.AuthorizedOperations, kmsg.ACLOperationRead) {
			r := acl.Right{Op: "Read", Resource: acl.Topic, Name: topic}
			return fmt.Errorf("fleet: read %s: %s", topic, acl.Missing(r, "", acl.ErrDescribeOnly))
		}
	}
	return nil
}

// topicErr is the error of Read for err, met asking for op on topic.
func topicErr(op, topic string, err error) error {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return noTopic(topic)
	case acl.Denied(err):
		return fmt.Errorf("fleet: read %s: %s", topic, acl.Missing(acl.Right{Op: op, Resource: acl.Topic, Name: topic}, "", err))
	}
	return fmt.Errorf("fleet: read %s: %w", topic, err)
}

// readWait bounds how long Read reads.
const readWait = 30 * time.Second

// readRecords calls each for every record of topic from from up to to,
// partition by partition.
func readRecords(ctx context.Context, cl *kgo.Client, topic string, from, to map[int32]int64, each func(*kgo.Record)) error {
	if len(from) == 0 {
		return nil
	}
	assign := map[int32]kgo.Offset{}
	for p, o := range from {
		assign[p] = kgo.NewOffset().At(o)
	}
	rd, err := kgo.NewClient(append(cl.Opts(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))...)
	if err != nil {
		return fmt.Errorf("fleet: read %s: %w", topic, err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	left := len(from)
	for left > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fleet: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return topicErr("Read", topic, ferr)
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			end, open := to[fp.Partition]
			if !open {
				return
			}
			for _, r := range fp.Records {
				if r.Offset < end {
					each(r)
				}
			}
			// Done once the record before the end was read: the last
			// record of a log is never compacted away.
			if n := len(fp.Records); n > 0 && fp.Records[n-1].Offset >= end-1 {
				delete(to, fp.Partition)
				left--
			}
		})
	}
	return nil
}
