package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/acl"
)

// seeds returns the seed brokers the admin client was given.
func (w *Worker) seeds(admin *kgo.Client) []string {
	if s, ok := admin.OptValue(kgo.SeedBrokers).([]string); ok && len(s) > 0 {
		return s
	}
	return w.cfg.brokers
}

// notAuthorized is the start-up error for a missing right.
func (w *Worker) notAuthorized(admin *kgo.Client, r acl.Right, cause error) error {
	var bootstrap string
	if s := w.seeds(admin); len(s) > 0 {
		bootstrap = s[0]
	}
	return fmt.Errorf("%w: %s", ErrNotAuthorized, acl.Missing(r, bootstrap, cause))
}

// topicInfo is what a metadata request says of one topic.
type topicInfo struct {
	id  kadm.TopicID
	err error
	ops int32 // authorized operations bit field; math.MinInt32 when the broker did not say
}

func (d topicInfo) allows(op kmsg.ACLOperation) bool {
	if d.ops == math.MinInt32 {
		return true
	}
	return d.ops&(1<<int(op)) != 0
}

// describeTopics asks for the metadata of the handled and required topics,
// with the operations the client is authorized for on each.
func (w *Worker) describeTopics(ctx context.Context, admin *kgo.Client) (map[string]topicInfo, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range append(append([]string{}, w.topics...), w.cfg.required...) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("worker: list topics: %w", err)
	}
	out := make(map[string]topicInfo, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		out[*t.Topic] = topicInfo{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode), ops: t.AuthorizedOperations}
	}
	return out, nil
}

// checkGroupRead checks that the worker may read its share group: a
// share-group member needs Read on the group for every heartbeat, fetch
// and acknowledgement. Describe of a group is implied by Read, so a
// refused describe means Read is missing. A group that does not exist
// yet tells nothing; the member's first heartbeat then fails in Run with
// the same error.
func (w *Worker) checkGroupRead(ctx context.Context, admin *kgo.Client) error {
	req := kmsg.NewPtrShareGroupDescribeRequest()
	req.GroupIDs = []string{w.cfg.group}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		if acl.Denied(err) {
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, err)
		}
		return nil // the member's heartbeat will say more
	}
	for _, g := range resp.Groups {
		gerr := kerr.ErrorForCode(g.ErrorCode)
		switch {
		case acl.Denied(gerr):
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, gerr)
		case gerr == nil && g.AuthorizedOperations != math.MinInt32 && g.AuthorizedOperations&(1<<int(kmsg.ACLOperationRead)) == 0:
			return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, errors.New("the broker authorizes Describe only"))
		}
	}
	return nil
}

// memberErr turns the share-group member's failure before it joined into
// the start-up error it stands for.
func (w *Worker) memberErr(admin *kgo.Client, err error) error {
	switch {
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Group, Name: w.cfg.group}, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return w.notAuthorized(admin, acl.Right{Op: "Read", Resource: acl.Topic, Name: strings.Join(w.topics, ",")}, err)
	}
	return fmt.Errorf("worker: share-group member: %w", err)
}
