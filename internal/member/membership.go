package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ---- membership ----

func (r *runner) sendHeartbeat() {
	r.hbBusy = true
	r.nIO++
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = r.cfg.Group
	req.MemberID = r.cfg.MemberID
	req.MemberEpoch = r.epoch
	req.SubscribedTopicNames = r.cfg.Topics
	if len(r.resubscribe) > 0 && r.epoch > 0 {
		req.SubscribedTopicNames = slices.DeleteFunc(slices.Clone(r.cfg.Topics), func(t string) bool { return slices.Contains(r.resubscribe, t) })
		r.resubscribe = nil
		r.hbDue = time.Now() // and the full subscription right after
	}
	cl, ctx := r.cfg.Client, r.ioCtx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		r.results <- result{kind: "hb", hb: resp, err: err}
	}()
}

func (r *runner) handleHeartbeat(resp *kmsg.ShareGroupHeartbeatResponse, err error) {
	r.hbBusy = false
	now := time.Now()
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	switch {
	case err == nil:
		r.hbErrs = 0
		if resp.HeartbeatIntervalMillis > 0 {
			r.interval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		r.hbDue = now.Add(r.interval)
		if r.epoch != resp.MemberEpoch {
			r.log.Debug("member: heartbeat", "epoch", resp.MemberEpoch)
		}
		r.epoch = resp.MemberEpoch
		if resp.Assignment != nil {
			as := map[[16]byte][]int32{}
			for _, t := range resp.Assignment.TopicPartitions {
				as[t.TopicID] = append(as[t.TopicID], t.Partitions...)
			}
			r.assigned = as
			r.replan()
		}
		if r.state != Joined && r.epoch > 0 {
			r.state = Joined
			r.everJoined = true
			r.log.Debug("member: joined", "epoch", r.epoch)
		}
		return
	case errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.FencedMemberEpoch):
		r.logEvery("fenced", slog.LevelWarn, "member: fenced by the coordinator; rejoining", "err", err)
		r.state = Fenced
		r.epoch = 0
		r.assigned = map[[16]byte][]int32{}
		r.replan()
		r.st.Rejoins++
		r.hbDue = now
		return
	}
	if !r.everJoined && (errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed)) {
		r.fatal = fmt.Errorf("member: first heartbeat: %w", err)
		return
	}
	r.st.HeartbeatErrors++
	r.hbErrs++
	r.hbDue = now.Add(backoff(r.hbErrs))
	level := slog.LevelWarn
	switch {
	case errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.NotCoordinator), errors.Is(err, kerr.CoordinatorLoadInProgress):
		level = slog.LevelDebug
	case errors.Is(err, kerr.GroupMaxSizeReached), errors.Is(err, kerr.GroupAuthorizationFailed), errors.Is(err, kerr.TopicAuthorizationFailed):
		level = slog.LevelError
	}
	var msg string
	if resp != nil && resp.ErrorMessage != nil {
		msg = *resp.ErrorMessage
	}
	r.logEvery("hb:"+err.Error(), level, "member: heartbeat failed; retrying", "err", err, "message", msg)
}

// replan recomputes which partitions each broker's session fetches.
func (r *runner) replan() {
	r.want = map[int32][]tp{}
	r.wantSet = map[tp]int32{}
	missing := false
	for id, ps := range r.assigned {
		name, ok := r.names[id]
		if !ok {
			missing = true
			continue
		}
		for _, p := range ps {
			k := tp{name, p}
			b, ok := r.leaders[k]
			if !ok || b < 0 {
				missing = true
				continue
			}
			r.want[b] = append(r.want[b], k)
			r.wantSet[k] = b + 1 // 0 means not wanted
		}
	}
	if missing && r.metaDue.IsZero() {
		r.metaDue = time.Now()
	}
}

func (r *runner) sendMetadata() {
	r.metaBusy = true
	r.metaDue = time.Time{}
	r.nIO++
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range r.cfg.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	cl, ctx := r.cfg.Client, r.ioCtx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		r.results <- result{kind: "meta", meta: resp, err: err}
	}()
}

func (r *runner) handleMetadata(resp *kmsg.MetadataResponse, err error) {
	r.metaBusy = false
	if err != nil {
		r.logEvery("meta", slog.LevelWarn, "member: metadata failed; retrying", "err", err)
		r.metaDue = time.Now().Add(500 * time.Millisecond)
		return
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		if old, ok := r.ids[*t.Topic]; ok && old != t.TopicID {
			r.topicRecreated(*t.Topic, old)
		}
		r.names[t.TopicID] = *t.Topic
		r.ids[*t.Topic] = t.TopicID
		for _, p := range t.Partitions {
			r.leaders[tp{*t.Topic, p.Partition}] = p.Leader
		}
	}
	r.replan()
	if r.metaDue.IsZero() {
		// Leaders move without telling us when nothing fails: look again now and then.
		r.metaDue = time.Now().Add(30 * time.Second)
	} else {
		r.metaDue = time.Now().Add(250 * time.Millisecond)
	}
}

// topicRecreated forgets a topic that was deleted and re-created under a
// new ID: its records held are gone with it (and the new topic's offsets
// start again, so their keys would clash), the sessions that fetch it
// reopen with the new ID, and the member subscribes again.
func (r *runner) topicRecreated(name string, old [16]byte) {
	r.log.Info("member: topic re-created under a new ID; fetching the new one", "topic", name)
	for k, h := range r.held {
		if k.Topic == name {
			r.loseOne(k, h, errors.New("topic deleted and re-created"))
		}
	}
	for _, s := range r.sessions {
		for p := range s.parts {
			if p.topic == name {
				r.reset(s)
				break
			}
		}
	}
	delete(r.names, old)
	delete(r.assigned, old)
	r.dec.forget(name)
	r.resubscribe = append(r.resubscribe, name)
	r.hbDue = time.Now()
}

func (r *runner) refreshMetadata() {
	if r.metaDue.IsZero() || time.Until(r.metaDue) > 100*time.Millisecond {
		r.metaDue = time.Now().Add(50 * time.Millisecond)
	}
}
