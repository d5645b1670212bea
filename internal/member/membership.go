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

func (m *Member) sendHeartbeat() {
	m.hbBusy = true
	m.nIO++
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.cfg.Group
	req.MemberID = m.cfg.MemberID
	req.MemberEpoch = m.epoch
	req.SubscribedTopicNames = m.cfg.Topics
	if len(m.resubscribe) > 0 && m.epoch > 0 {
		req.SubscribedTopicNames = slices.DeleteFunc(slices.Clone(m.cfg.Topics), func(t string) bool { return slices.Contains(m.resubscribe, t) })
		m.resubscribe = nil
		m.hbDue = time.Now() // and the full subscription right after
	}
	cl, ctx := m.cfg.Client, m.ioCtx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		m.results <- result{kind: "hb", hb: resp, err: err}
	}()
}

func (m *Member) handleHeartbeat(resp *kmsg.ShareGroupHeartbeatResponse, err error) {
	m.hbBusy = false
	now := time.Now()
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	switch {
	case err == nil:
		m.hbErrs = 0
		if resp.HeartbeatIntervalMillis > 0 {
			m.interval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		m.hbDue = now.Add(m.interval)
		if m.epoch != resp.MemberEpoch {
			m.log.Debug("member: heartbeat", "epoch", resp.MemberEpoch)
		}
		m.epoch = resp.MemberEpoch
		if resp.Assignment != nil {
			as := map[[16]byte][]int32{}
			for _, t := range resp.Assignment.TopicPartitions {
				as[t.TopicID] = append(as[t.TopicID], t.Partitions...)
			}
			m.assigned = as
			m.replan()
		}
		if m.state != Joined && m.epoch > 0 {
			m.state = Joined
			m.everJoined = true
			m.log.Debug("member: joined", "epoch", m.epoch)
		}
		return
	case errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.FencedMemberEpoch):
		m.logEvery("fenced", slog.LevelWarn, "member: fenced by the coordinator; rejoining", "err", err)
		m.state = Fenced
		m.epoch = 0
		m.assigned = map[[16]byte][]int32{}
		m.replan()
		m.st.Rejoins++
		m.hbDue = now
		return
	}
	if !m.everJoined && (errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed)) {
		m.fatal = fmt.Errorf("member: first heartbeat: %w", err)
		return
	}
	m.st.HeartbeatErrors++
	m.hbErrs++
	m.hbDue = now.Add(backoff(m.hbErrs))
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
	m.logEvery("hb:"+err.Error(), level, "member: heartbeat failed; retrying", "err", err, "message", msg)
}

// replan recomputes which partitions each broker's session fetches.
func (m *Member) replan() {
	m.want = map[int32][]tp{}
	m.wantSet = map[tp]int32{}
	missing := false
	for id, ps := range m.assigned {
		name, ok := m.names[id]
		if !ok {
			missing = true
			continue
		}
		for _, p := range ps {
			k := tp{name, p}
			b, ok := m.leaders[k]
			if !ok || b < 0 {
				missing = true
				continue
			}
			m.want[b] = append(m.want[b], k)
			m.wantSet[k] = b + 1 // 0 means not wanted
		}
	}
	if missing && m.metaDue.IsZero() {
		m.metaDue = time.Now()
	}
}

func (m *Member) sendMetadata() {
	m.metaBusy = true
	m.metaDue = time.Time{}
	m.nIO++
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range m.cfg.Topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	cl, ctx := m.cfg.Client, m.ioCtx
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		m.results <- result{kind: "meta", meta: resp, err: err}
	}()
}

func (m *Member) handleMetadata(resp *kmsg.MetadataResponse, err error) {
	m.metaBusy = false
	if err != nil {
		m.logEvery("meta", slog.LevelWarn, "member: metadata failed; retrying", "err", err)
		m.metaDue = time.Now().Add(500 * time.Millisecond)
		return
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		if old, ok := m.ids[*t.Topic]; ok && old != t.TopicID {
			m.topicRecreated(*t.Topic, old)
		}
		m.names[t.TopicID] = *t.Topic
		m.ids[*t.Topic] = t.TopicID
		for _, p := range t.Partitions {
			m.leaders[tp{*t.Topic, p.Partition}] = p.Leader
		}
	}
	m.replan()
	if m.metaDue.IsZero() {
		// Leaders move without telling us when nothing fails: look again now and then.
		m.metaDue = time.Now().Add(30 * time.Second)
	} else {
		m.metaDue = time.Now().Add(250 * time.Millisecond)
	}
}

// topicRecreated forgets a topic that was deleted and re-created under a
// new ID: its records held are gone with it (and the new topic's offsets
// start again, so their keys would clash), the sessions that fetch it
// reopen with the new ID, and the member subscribes again.
func (m *Member) topicRecreated(name string, old [16]byte) {
	m.log.Info("member: topic re-created under a new ID; fetching the new one", "topic", name)
	for k, h := range m.held {
		if k.Topic == name {
			m.loseOne(k, h, errors.New("topic deleted and re-created"))
		}
	}
	for _, s := range m.sessions {
		for p := range s.parts {
			if p.topic == name {
				m.reset(s)
				break
			}
		}
	}
	delete(m.names, old)
	delete(m.assigned, old)
	m.dec.forget(name)
	m.resubscribe = append(m.resubscribe, name)
	m.hbDue = time.Now()
}

func (m *Member) refreshMetadata() {
	if m.metaDue.IsZero() || time.Until(m.metaDue) > 100*time.Millisecond {
		m.metaDue = time.Now().Add(50 * time.Millisecond)
	}
}
