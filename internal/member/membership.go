package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// membership is the member's place in the group, as its heartbeats learn
// it. Owned by Run's goroutine.
type membership struct {
	state    State
	epoch    int32                // the member epoch: 0 to join, then the coordinator's; −1 once left
	interval time.Duration        // the heartbeat interval the coordinator asks for (1 s until it says)
	busy     bool                 // a heartbeat is in flight
	due      time.Time            // when the next heartbeat goes (zero: at once)
	errs     int                  // heartbeats failed in a row, for the backoff
	assigned map[[16]byte][]int32 // the assignment: partitions by topic ID
	joinedAt time.Time            // when the member last joined (epoch 0 → > 0)
	// everJoined: the coordinator accepted the member once. From then on
	// an ACL error is retried rather than fatal, and Run's end sends the
	// leave heartbeat even while the member is fenced.
	everJoined bool
	// resubscribe names topics found re-created under a new ID: the next
	// heartbeat subscribes without them and the one after with them
	// again, so a coordinator that assigns by topic ID (kfake does not
	// notice a re-created topic by itself) assigns the new one.
	resubscribe []string
	// coord is the node the heartbeats go to: the group's coordinator as
	// the member last found it (findCoordinator); −1: look it up first.
	coord int32
}

// routing maps the assignment onto brokers: topic IDs and partition
// leaders from Metadata, and from them which broker's share session
// fetches which assigned partition (replan). Owned by Run's goroutine.
type routing struct {
	names   map[[16]byte]string // topic ID → name, of every subscribed topic Metadata described
	ids     map[string][16]byte // topic name → ID
	leaders map[tp]int32        // partition → leader broker id (−1: none)
	busy    bool                // a Metadata request is in flight
	due     time.Time           // when the next Metadata request goes; zero: none wanted
	want    map[int32][]tp      // broker id → the assigned partitions it leads: what its session fetches
	wantSet map[tp]int32        // partition → its broker id + 1 in want; absent (0): no session fetches it
	// plan counts the replans (0: none yet), so that a session's fetch
	// walks want and its partitions only when they may differ (sendFetch).
	plan uint64
	// paused are the topics the executor paused (PauseTopics): assigned,
	// but left out of want, and forgotten by the sessions even while
	// records of them are held, so that no fetch acquires more of them.
	paused map[string]bool
}

// ---- membership ----

func (m *Member) sendHeartbeat() {
	m.group.busy = true
	m.nIO++
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.cfg.Group
	req.MemberID = m.cfg.MemberID
	req.MemberEpoch = m.group.epoch
	req.SubscribedTopicNames = m.cfg.Topics
	if len(m.group.resubscribe) > 0 && m.group.epoch > 0 {
		req.SubscribedTopicNames = slices.DeleteFunc(slices.Clone(m.cfg.Topics), func(t string) bool { return slices.Contains(m.group.resubscribe, t) })
		m.group.resubscribe = nil
		m.group.due = time.Now() // and the full subscription right after
	}
	cl, ctx, coord := m.cfg.Client, m.ioCtx, m.group.coord
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var resp *kmsg.ShareGroupHeartbeatResponse
		var err error
		if coord < 0 {
			coord, err = findCoordinator(ctx, cl, req.GroupID)
		}
		if err == nil {
			resp, err = req.RequestWith(ctx, cl.Broker(int(coord)))
		}
		m.results <- result{kind: "hb", hb: resp, err: err, coord: coord}
	}()
}

// staleCoordinator reports whether err says the broker asked is not (or
// not yet) the group's coordinator.
func staleCoordinator(err error) bool {
	return errors.Is(err, kerr.NotCoordinator) || errors.Is(err, kerr.CoordinatorNotAvailable) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress)
}

// findCoordinator asks any broker which node coordinates group.
//
// The member sends its heartbeats to the coordinator it found itself
// (kgo.Client.Broker), not through kgo's cached coordinator: franz-go
// (v1.22.3) sends a ShareGroupHeartbeat to the coordinator it has cached
// and, unlike its other group requests, keeps the entry when the broker
// answers that it is not the coordinator, or when the broker is gone.
// Once a broker restart moved the coordinator, every heartbeat went to
// the old broker; once the coordinator's broker died for good, to a
// broker that no longer answered: the group dropped the member, each job
// it ended was reported lost for want of a heartbeat, and nothing brought
// it back (RELIABILITY.md, "A group coordinator that moves"). The member
// looks the coordinator up again after an answer that the node is not
// the coordinator and after any failed request (handleHeartbeat).
func findCoordinator(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 0 // a group; share groups are coordinated as groups
	req.CoordinatorKey = group
	req.CoordinatorKeys = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	for _, c := range resp.Coordinators {
		if c.Key != group {
			continue
		}
		if err := kerr.ErrorForCode(c.ErrorCode); err != nil {
			return -1, err
		}
		return c.NodeID, nil
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil { // a v0–3 answer
		return -1, err
	}
	return resp.NodeID, nil
}

// handleHeartbeat takes a heartbeat's answer. Answered: the interval and
// epoch it gives, a changed assignment (planned again, replan), Joined on
// the first epoch, and the next heartbeat due at the interval, or sooner
// (AssignmentPoll) while a member that just joined has no partitions.
// Fenced (UnknownMemberID, FencedMemberEpoch): the member drops its
// assignment and rejoins with epoch 0 at once. An authorization error
// before the member ever joined is fatal (Run returns it); any other error
// retries with backoff, logged once a minute per error.
func (m *Member) handleHeartbeat(resp *kmsg.ShareGroupHeartbeatResponse, err error, coord int32) {
	m.group.busy = false
	now := time.Now()
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	m.group.coord = coord
	if err != nil && (!isKerr(err) || staleCoordinator(err)) {
		m.group.coord = -1 // not answered, or not the coordinator: look it up again
	}
	m.noteReach(peerCoordinator, err)
	switch {
	case err == nil:
		m.beatAt.Store(max(int64(now.Sub(m.born)), 1))
		m.group.errs = 0
		if resp.HeartbeatIntervalMillis > 0 {
			m.group.interval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		m.group.due = now.Add(m.group.interval)
		if m.group.epoch != resp.MemberEpoch {
			m.log.Debug("member: heartbeat", "epoch", resp.MemberEpoch)
		}
		m.group.epoch = resp.MemberEpoch
		if resp.Assignment != nil {
			as := map[[16]byte][]int32{}
			for _, t := range resp.Assignment.TopicPartitions {
				as[t.TopicID] = append(as[t.TopicID], t.Partitions...)
			}
			// kfake sends the assignment in every heartbeat; the same one
			// again changes no session, so it is not planned again.
			if !maps.EqualFunc(as, m.group.assigned, slices.Equal) {
				m.group.assigned = as
				m.replan()
			}
		}
		if m.group.state != Joined && m.group.epoch > 0 {
			m.group.state = Joined
			m.group.everJoined = true
			m.group.joinedAt = now
			m.log.Debug("member: joined", "epoch", m.group.epoch)
		}
		if len(m.group.assigned) == 0 && now.Sub(m.group.joinedAt) < m.group.interval {
			m.group.due = now.Add(min(m.group.interval, m.cfg.AssignmentPoll))
		}
		return
	case errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.FencedMemberEpoch):
		m.logEvery("fenced", slog.LevelWarn, "member: fenced by the coordinator; rejoining", "err", err)
		m.fences.Add(1)
		m.group.state = Fenced
		m.group.epoch = 0
		m.group.assigned = map[[16]byte][]int32{}
		m.replan()
		m.st.Rejoins++
		m.group.due = now
		return
	}
	if !m.group.everJoined && (errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed)) {
		m.fatal = fmt.Errorf("member: first heartbeat: %w", err)
		return
	}
	m.st.HeartbeatErrors++
	m.group.errs++
	m.group.due = now.Add(backoff(m.group.errs))
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

// AssignmentPollDefault is the default [Config.AssignmentPoll]: how often
// a member that joined with no partitions heartbeats during its first
// heartbeat interval, rather than once.
//
// Kafka computes a share group's target assignment apart from the
// heartbeat that joins (KIP-1263: the assignor runs off the coordinator
// thread, at most once per group.share.assignment.interval.ms, 1 s by
// default), so the join's answer carries an empty assignment and the
// partitions come in the first heartbeat after the assignment is made
// (about the assignment interval after the join): at the default 5 s
// heartbeat interval, 5 s after the join. Nothing bounds how soon a
// member may heartbeat (GroupMetadataManager's share heartbeat has no
// minimum gap; the Java consumer heartbeats at once, not at the interval,
// while JOINING and ACKNOWLEDGING: AbstractMembershipManager
// .shouldHeartbeatNow), so a member polls every AssignmentPoll during its
// first interval. A member that still has no partitions after it (a group
// with more members than partitions) heartbeats at the interval.
const AssignmentPollDefault = 200 * time.Millisecond

// replan recomputes which partitions each broker's session fetches. When
// the priorities leave nothing to fetch (none of the topics they ask for
// has a partition here), they ask for more (fetchPriority.unstick).
func (m *Member) replan() {
	for m.plan() && len(m.meta.wantSet) == 0 && m.prio.unstick() {
		// Planned again with one topic or class more: ends once every
		// topic is asked for.
	}
}

// plan recomputes which partitions each broker's session fetches, for
// the topics neither paused nor gated by the priorities; it reports
// whether the priorities left out an assigned partition.
func (m *Member) plan() (gated bool) {
	m.meta.plan++
	m.meta.want = map[int32][]tp{}
	m.meta.wantSet = map[tp]int32{}
	missing := false
	for id, ps := range m.group.assigned {
		name, ok := m.meta.names[id]
		if !ok {
			missing = true
			continue
		}
		if m.meta.paused[name] {
			continue
		}
		if m.prio.gates(name) {
			gated = gated || len(ps) > 0
			continue
		}
		for _, p := range ps {
			k := tp{name, p}
			b, ok := m.meta.leaders[k]
			if !ok || b < 0 {
				missing = true
				continue
			}
			m.meta.want[b] = append(m.meta.want[b], k)
			m.meta.wantSet[k] = b + 1 // 0 means not wanted
		}
	}
	m.markIdle()
	m.dec.forgetParts(func(p tp) bool { return m.meta.wantSet[p] == 0 })
	// An assigned partition Metadata has not described yet (a partition
	// just added to the topic, a new leader) is looked up now, not at the
	// next periodic refresh up to 30 s away.
	if missing && (m.meta.due.IsZero() || time.Until(m.meta.due) > metadataRetry) {
		m.meta.due = time.Now()
	}
	return gated
}

// pauseTopics makes topics the paused set and replans if it changed.
func (m *Member) pauseTopics(topics []string) {
	set := make(map[string]bool, len(topics))
	for _, t := range topics {
		set[t] = true
	}
	if maps.Equal(set, m.meta.paused) {
		return
	}
	m.meta.paused = set
	m.log.Debug("member: topics paused", "topics", topics)
	m.replan()
}

// forgettable reports whether session s, whose partitions include p, may
// forget p: p is not wanted there, and either nothing of it is held there
// or its topic is paused or gated by the priorities (its records may wait
// long in hand, and a partition left in the session is fetched).
func (m *Member) forgettable(s *session, p tp) bool {
	return m.meta.wantSet[p] != s.broker+1 && (s.held.get(p) == 0 || m.meta.paused[p.topic] || m.prio.gates(p.topic))
}

// metadataRetry is how soon Metadata is asked again while an assigned
// partition has no known leader.
const metadataRetry = 250 * time.Millisecond

func (m *Member) sendMetadata() {
	m.meta.busy = true
	m.meta.due = time.Time{}
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
	m.meta.busy = false
	if err != nil {
		m.logEvery("meta", slog.LevelWarn, "member: metadata failed; retrying", "err", err)
		m.meta.due = time.Now().Add(500 * time.Millisecond)
		return
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		if old, ok := m.meta.ids[*t.Topic]; ok && old != t.TopicID {
			m.topicRecreated(*t.Topic, old)
		}
		m.meta.names[t.TopicID] = *t.Topic
		m.meta.ids[*t.Topic] = t.TopicID
		for _, p := range t.Partitions {
			m.meta.leaders[tp{*t.Topic, p.Partition}] = p.Leader
		}
	}
	m.replan()
	if m.meta.due.IsZero() {
		// Leaders move without telling us when nothing fails: look again now and then.
		m.meta.due = time.Now().Add(30 * time.Second)
	} else {
		m.meta.due = time.Now().Add(metadataRetry)
	}
}

// topicRecreated forgets a topic that was deleted and re-created under a
// new ID: its records held are gone with it (and the new topic's offsets
// start again, so their keys would clash), the sessions that fetch it
// reopen with the new ID, and the member subscribes again.
func (m *Member) topicRecreated(name string, old [16]byte) {
	m.log.Info("member: topic re-created under a new ID; fetching the new one", "topic", name)
	for k, h := range m.held.All() {
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
	delete(m.meta.names, old)
	delete(m.group.assigned, old)
	m.dec.forget(name)
	m.group.resubscribe = append(m.group.resubscribe, name)
	m.group.due = time.Now()
}

func (m *Member) refreshMetadata() {
	if m.meta.due.IsZero() || time.Until(m.meta.due) > 100*time.Millisecond {
		m.meta.due = time.Now().Add(50 * time.Millisecond)
	}
}
