package brokerprobe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrRetry is a share request that failed for a reason the member
// recovers from (a broker away, a session or membership lost).
var ErrRetry = errors.New("retry")

// Member is one share-group member speaking the protocol itself:
// heartbeats in the background, one share session, explicit acks.
type Member struct {
	cl       *kgo.Client // heartbeats
	fcl      *kgo.Client // share fetches and acks: the connection the share session is tied to
	seeds    []string
	group    string
	topic    string
	topicID  [16]byte
	memberID string

	hbStop    chan struct{}
	hbDone    chan struct{}
	hbRunning bool // the heartbeat goroutine was started (join)

	mu         chan struct{} // guards the below (a one-slot semaphore)
	epoch      int32
	assigned   bool
	sessEpoch  int32
	hbInterval time.Duration
}

func NewMember(seeds []string, group, topic string, topicID [16]byte) *Member {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(5*time.Second))
	fcl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(5*time.Second))
	return &Member{cl: cl, fcl: fcl, seeds: seeds, group: group, topic: topic, topicID: topicID, memberID: newUUID(),
		hbStop: make(chan struct{}), hbDone: make(chan struct{}), mu: make(chan struct{}, 1), hbInterval: 500 * time.Millisecond}
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (m *Member) lock()   { m.mu <- struct{}{} }
func (m *Member) unlock() { <-m.mu }

// Join heartbeats until the member has the partition, then keeps
// heartbeating in the background.
func (m *Member) Join(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.heartbeat(ctx)
		m.lock()
		ok := m.assigned
		m.unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the member got no assignment within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	m.hbRunning = true
	go func() {
		defer close(m.hbDone)
		for {
			select {
			case <-m.hbStop:
				return
			case <-time.After(m.hbInterval):
			}
			m.heartbeat(ctx)
		}
	}()
	return nil
}

func (m *Member) heartbeat(ctx context.Context) {
	m.lock()
	epoch := m.epoch
	m.unlock()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.group
	req.MemberID = m.memberID
	req.MemberEpoch = epoch
	if epoch == 0 {
		req.SubscribedTopicNames = []string{m.topic}
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(hctx, m.cl)
	if err != nil {
		return
	}
	m.lock()
	defer m.unlock()
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil:
		m.epoch = resp.MemberEpoch
		if resp.HeartbeatIntervalMillis > 0 {
			m.hbInterval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		if a := resp.Assignment; a != nil {
			m.assigned = false
			for _, tp := range a.TopicPartitions {
				if tp.TopicID == m.topicID && slices.Contains(tp.Partitions, 0) {
					m.assigned = true
				}
			}
		}
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.FencedMemberEpoch):
		m.epoch = 0 // Join again, same member id
	}
}

// Reset forgets the share session (the broker's went with its restart).
func (m *Member) Reset() {
	m.lock()
	m.sessEpoch = 0
	m.unlock()
}

// Close leaves the group and closes the member's connections.
func (m *Member) Close() {
	m.Leave()
	m.cl.Close()
	m.fcl.Close()
}

// Leave stops the heartbeats and leaves the group (epoch -1); the share
// session and its connection stay. Rejoin joins again.
func (m *Member) Leave() {
	select {
	case <-m.hbStop:
		return
	default:
		close(m.hbStop)
	}
	if m.hbRunning {
		<-m.hbDone
		m.hbRunning = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = m.group, m.memberID, -1
	_, _ = req.RequestWith(ctx, m.cl)
}

// Rejoin joins the group again (epoch 0, same member id) after Leave.
func (m *Member) Rejoin(ctx context.Context) error {
	m.lock()
	m.epoch, m.assigned = 0, false
	m.unlock()
	m.hbStop, m.hbDone = make(chan struct{}), make(chan struct{})
	return m.Join(ctx)
}

// Reconnect drops the share session's connection (a new fetch client;
// the old one closed) and forgets the session.
func (m *Member) Reconnect() {
	m.fcl.Close()
	m.fcl, _ = kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.RetryTimeout(5*time.Second))
	m.Reset()
}

// CloseSession closes the share session with a final ShareAcknowledge
// (epoch -1, no acks) on its connection, which stays open.
func (m *Member) CloseSession(ctx context.Context) error {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = -1
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(actx).RetriableRequest(actx, req)
	m.Reset()
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.(*kmsg.ShareAcknowledgeResponse).ErrorCode)
}

// Fetch sends one ShareFetch (opening the session when there is none)
// carrying acks, and returns the ranges it acquired.
func (m *Member) Fetch(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	m.lock()
	sess := m.sessEpoch
	m.unlock()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = sess
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, 8<<20
	req.MaxRecords, req.BatchSize = 1000, 1000
	if sess == 0 || len(acks) > 0 {
		t := kmsg.NewShareFetchRequestTopic()
		t.TopicID = m.topicID
		p := kmsg.NewShareFetchRequestTopicPartition()
		p.Partition = 0
		for _, a := range acks {
			b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
			b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.FirstOffset, a.LastOffset, a.AcknowledgeTypes
			p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
		}
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(fctx).RetriableRequest(fctx, req)
	if err != nil {
		m.Reset()
		return nil, ErrRetry
	}
	r := resp.(*kmsg.ShareFetchResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		m.Reset()
		return nil, fmt.Errorf("%w: share fetch: %v", ErrRetry, err)
	}
	m.lock()
	m.sessEpoch = sess + 1
	m.unlock()
	var got []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("%w: share fetch partition: %v", ErrRetry, err)
			}
			if err := kerr.ErrorForCode(p.AcknowledgeErrorCode); err != nil {
				return nil, fmt.Errorf("share fetch acks: %v", err)
			}
			got = append(got, p.AcquiredRecords...)
		}
	}
	return got, nil
}

// Ack sends a ShareAcknowledge in the session and checks its answer.
func (m *Member) Ack(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) error {
	if len(acks) == 0 {
		return nil
	}
	m.lock()
	sess := m.sessEpoch
	m.unlock()
	if sess == 0 {
		return errors.New("no share session to ack in")
	}
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = sess
	t := kmsg.NewShareAcknowledgeRequestTopic()
	t.TopicID = m.topicID
	p := kmsg.NewShareAcknowledgeRequestTopicPartition()
	p.Partition = 0
	p.AcknowledgementBatches = acks
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(actx).RetriableRequest(actx, req)
	if err != nil {
		m.Reset()
		return err
	}
	r := resp.(*kmsg.ShareAcknowledgeResponse)
	m.lock()
	m.sessEpoch = sess + 1
	m.unlock()
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return err
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

// broker is the one broker (node 1), on the fetch connection the share
// session is tied to.
func (m *Member) broker(context.Context) *kgo.Broker { return m.fcl.Broker(1) }

// ID is the member's ID.
func (m *Member) ID() string { return m.memberID }
