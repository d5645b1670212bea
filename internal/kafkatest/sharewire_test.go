package kafkatest_test

// A raw share-protocol member for the conformance tests in
// protocol_test.go: it joins a share group with ShareGroupHeartbeat, keeps
// heartbeating in a goroutine it owns, and sends ShareFetch and
// ShareAcknowledge requests built by hand, with the share session epoch the
// test chooses, to the leader of its topic's partitions. It decodes only
// the records the broker says it acquired and returns every error code, so
// a test can assert exactly what the broker answered. It is test-only and
// deliberately small: the share-group member in internal/member has its own
// code.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/kafkatest"
)

// Acknowledge types on the wire (KIP-932; RENEW is KIP-1222).
const (
	ackGap     int8 = 0
	ackAccept  int8 = 1
	ackRelease int8 = 2
	ackReject  int8 = 3
	ackRenew   int8 = 4
)

// Share acquire modes (KIP-1206).
const (
	batchOptimized int8 = 0
	recordLimit    int8 = 1
)

const (
	// wireWait bounds every wait of the harness: joining (the first
	// share group on a fresh Kafka broker waits seconds for its
	// coordinator), the first records of a share partition, a request.
	wireWait = 30 * time.Second
	// pollWait is the MaxWait of the fetches that wait for records.
	pollWait = 200 * time.Millisecond
	// partitionMaxBytes is what a fetching request asks per partition.
	partitionMaxBytes = 1 << 20
)

// ackBatch is one acknowledgement batch of a partition: offsets first to
// last with one type for all or one type per offset.
type ackBatch struct {
	p           int32
	first, last int64
	types       []int8
}

// acks returns one single-offset batch of type typ per offset, in the
// order given.
func acks(typ int8, p int32, offsets ...int64) []ackBatch {
	out := make([]ackBatch, len(offsets))
	for i, o := range offsets {
		out[i] = ackBatch{p: p, first: o, last: o, types: []int8{typ}}
	}
	return out
}

// got is one acquired record.
type got struct {
	p     int32
	off   int64
	key   string
	count int16
}

func (g got) String() string { return fmt.Sprintf("%d@%d#%d", g.p, g.off, g.count) }

// fetchResult is what a ShareFetch answered.
type fetchResult struct {
	err    int16 // top-level error code
	lockMs int32 // AcquisitionLockTimeoutMillis
	// parts holds each partition's ErrorCode and AcknowledgeErrorCode.
	parts map[int32][2]int16
	recs  []got
}

// ackErr returns the AcknowledgeErrorCode of partition p.
func (r fetchResult) ackErr(p int32) int16 { return r.parts[p][1] }

// ackResult is what a ShareAcknowledge answered.
type ackResult struct {
	err    int16 // top-level error code
	lockMs int32 // AcquisitionLockTimeoutMillis (v2+)
	parts  map[int32]int16
}

// code names an error code for messages.
func code(c int16) string {
	if c == 0 {
		return "NONE"
	}
	if err := kerr.ErrorForCode(c); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			return ke.Message
		}
		return err.Error()
	}
	return fmt.Sprint(c)
}

// wireMember is one share-group member speaking the protocol itself. Its
// share session lives on the one broker that leads every partition of its
// topic (the tests use single-broker clusters). Only the test goroutine
// uses epoch and the request methods; the heartbeat goroutine owns the
// membership fields under mu.
type wireMember struct {
	t       testing.TB
	name    string
	cl      *kgo.Client
	group   string
	id      string
	topic   string
	topicID [16]byte
	broker  int32

	// epoch is the share session epoch of the next request: 0 opens a
	// session, each answered request moves it on, -1 marks it closed.
	epoch int32

	mu          sync.Mutex
	memberEpoch int32
	assigned    []int32
	hbErr       int16 // the last heartbeat's error code

	stop context.CancelFunc // ends the heartbeat goroutine
	done chan struct{}      // closed when it has returned
	gone bool               // client closed or left: nothing to clean up
}

// joinShare joins group as a new member subscribed to topic and waits
// (bounded) for an assignment of topic. The member heartbeats until
// stopHeartbeats or the end of t; at the end of t it closes its share
// session (epoch -1, releasing what it holds) and leaves the group.
func joinShare(t testing.TB, c *kafkatest.Cluster, name, group, topic string, opts ...kgo.Opt) *wireMember {
	t.Helper()
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return joinShareAs(t, c, name, group, topic, base64.RawURLEncoding.EncodeToString(id), opts...)
}

// joinShareAs is joinShare with a given member id.
func joinShareAs(t testing.TB, c *kafkatest.Cluster, name, group, topic, id string, opts ...kgo.Opt) *wireMember {
	t.Helper()
	m := &wireMember{t: t, name: name, cl: c.Client(t, opts...), group: group, id: id, topic: topic}
	m.lookUp()
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	interval := 100 * time.Millisecond
	for {
		resp, err := m.heartbeat(ctx, []string{topic})
		if err == nil && resp.ErrorCode == 0 && len(m.assignment()) > 0 {
			break
		}
		if err == nil && resp.ErrorCode != 0 && !kerr.IsRetriable(kerr.ErrorForCode(resp.ErrorCode)) {
			t.Fatalf("%s: join %s: %s", name, group, code(resp.ErrorCode))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no assignment of %s in group %s within %v (last: %v)", name, topic, group, wireWait, err)
		case <-time.After(interval):
		}
	}
	hbCtx, stop := context.WithCancel(context.Background())
	m.stop, m.done = stop, make(chan struct{})
	go m.heartbeats(hbCtx)
	t.Cleanup(m.cleanup)
	return m
}

// lookUp finds the topic's id and the broker leading its partitions.
func (m *wireMember) lookUp() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(m.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		m.t.Fatalf("%s: metadata: %v", m.name, err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		m.t.Fatalf("%s: metadata of %s: %+v", m.name, m.topic, resp.Topics)
	}
	mt := resp.Topics[0]
	m.topicID = mt.TopicID
	m.broker = -1
	for _, p := range mt.Partitions {
		if m.broker == -1 {
			m.broker = p.Leader
		}
		if p.Leader != m.broker {
			m.t.Fatalf("%s: %s has leaders %d and %d: the harness keeps one share session", m.name, m.topic, m.broker, p.Leader)
		}
	}
}

// heartbeat sends one ShareGroupHeartbeat with the current member epoch
// and records the answer.
func (m *wireMember) heartbeat(ctx context.Context, topics []string) (*kmsg.ShareGroupHeartbeatResponse, error) {
	m.mu.Lock()
	epoch := m.memberEpoch
	m.mu.Unlock()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.group
	req.MemberID = m.id
	req.MemberEpoch = epoch
	req.SubscribedTopicNames = topics
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hbErr = resp.ErrorCode
	if resp.ErrorCode != 0 {
		return resp, nil
	}
	m.memberEpoch = resp.MemberEpoch
	if a := resp.Assignment; a != nil {
		m.assigned = nil
		for _, tp := range a.TopicPartitions {
			if tp.TopicID == m.topicID {
				m.assigned = append(m.assigned, tp.Partitions...)
			}
		}
		slices.Sort(m.assigned)
	}
	return resp, nil
}

// heartbeats heartbeats every 100 ms (below both brokers' intervals)
// until ctx ends.
func (m *wireMember) heartbeats(ctx context.Context) {
	defer close(m.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		_, _ = m.heartbeat(ctx, nil)
	}
}

// stopHeartbeats stops the heartbeat goroutine and waits for it; the
// member stays in the group until the broker's session timeout.
func (m *wireMember) stopHeartbeats() {
	m.stop()
	<-m.done
}

// assignment returns the partitions of the topic assigned to m.
func (m *wireMember) assignment() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.assigned)
}

// leave sends the leave heartbeat (member epoch -1) after stopping the
// heartbeats, and returns its error code. The share session stays open.
func (m *wireMember) leave() int16 {
	m.t.Helper()
	m.stopHeartbeats()
	m.mu.Lock()
	m.memberEpoch = -1
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	resp, err := m.heartbeat(ctx, nil)
	if err != nil {
		m.t.Fatalf("%s: leave: %v", m.name, err)
	}
	return resp.ErrorCode
}

// closeClient closes the member's client, and with it its connections,
// without closing the share session or leaving the group.
func (m *wireMember) closeClient() {
	m.stopHeartbeats()
	m.gone = true
	m.cl.Close()
}

// cleanup closes the share session and leaves the group, so neither
// records nor members linger on a shared broker.
func (m *wireMember) cleanup() {
	m.stopHeartbeats()
	if m.gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	if m.epoch > 0 {
		req := m.ackReq(false)
		req.ShareSessionEpoch = -1
		_, _ = req.RequestWith(ctx, m.cl.Broker(int(m.broker)))
	}
	m.mu.Lock()
	leave := m.memberEpoch != -1
	m.memberEpoch = -1
	m.mu.Unlock()
	if leave {
		_, _ = m.heartbeat(ctx, nil)
	}
}

// fetchReq builds a record_limit ShareFetch for at most max records
// (MaxRecords = BatchSize = max) from every assigned partition, waiting
// up to pollWait, with the given acks, at the current session epoch.
func (m *wireMember) fetchReq(max int32, ab ...ackBatch) *kmsg.ShareFetchRequest {
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = kmsg.StringPtr(m.group)
	req.MemberID = kmsg.StringPtr(m.id)
	req.ShareSessionEpoch = m.epoch
	req.MaxWaitMillis = int32(pollWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxRecords = max
	req.BatchSize = max
	req.ShareAcquireMode = recordLimit
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.topicID
	parts := map[int32]int{}
	for _, p := range m.assignment() {
		rp := kmsg.NewShareFetchRequestTopicPartition()
		rp.Partition = p
		rp.PartitionMaxBytes = partitionMaxBytes
		parts[p] = len(rt.Partitions)
		rt.Partitions = append(rt.Partitions, rp)
	}
	for _, a := range ab {
		i, ok := parts[a.p]
		if !ok {
			rp := kmsg.NewShareFetchRequestTopicPartition()
			rp.Partition = a.p
			parts[a.p] = len(rt.Partitions)
			i = parts[a.p]
			rt.Partitions = append(rt.Partitions, rp)
		}
		b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.first, a.last, a.types
		rt.Partitions[i].AcknowledgementBatches = append(rt.Partitions[i].AcknowledgementBatches, b)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// renewFetchReq builds a renew-only ShareFetch: IsRenewAck and every
// fetch parameter zero (MaxBytes too, which kmsg defaults to the maximum).
func (m *wireMember) renewFetchReq(ab ...ackBatch) *kmsg.ShareFetchRequest {
	req := m.fetchReq(0, ab...)
	req.IsRenewAck = true
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.MaxRecords, req.BatchSize = 0, 0, 0, 0, 0
	for i := range req.Topics[0].Partitions {
		req.Topics[0].Partitions[i].PartitionMaxBytes = 0
	}
	return req
}

// ackReq builds a ShareAcknowledge with the given acks at the current
// session epoch.
func (m *wireMember) ackReq(renew bool, ab ...ackBatch) *kmsg.ShareAcknowledgeRequest {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID = kmsg.StringPtr(m.group)
	req.MemberID = kmsg.StringPtr(m.id)
	req.ShareSessionEpoch = m.epoch
	req.IsRenewAck = renew
	if len(ab) == 0 {
		return req
	}
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m.topicID
	parts := map[int32]int{}
	for _, a := range ab {
		i, ok := parts[a.p]
		if !ok {
			rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
			rp.Partition = a.p
			parts[a.p] = len(rt.Partitions)
			i = parts[a.p]
			rt.Partitions = append(rt.Partitions, rp)
		}
		b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
		b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.first, a.last, a.types
		rt.Partitions[i].AcknowledgementBatches = append(rt.Partitions[i].AcknowledgementBatches, b)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// sendFetch sends req as built (epoch included) to the member's broker on
// cl and decodes the answer. It never cancels the request: the context
// only bounds a broker that does not answer at all, which fails the test.
func (m *wireMember) sendFetch(cl *kgo.Client, req *kmsg.ShareFetchRequest) fetchResult {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(m.broker)))
	if err != nil {
		m.t.Fatalf("%s: ShareFetch: %v", m.name, err)
	}
	r := fetchResult{err: resp.ErrorCode, lockMs: resp.AcquisitionLockTimeoutMillis, parts: map[int32][2]int16{}}
	for _, rt := range resp.Topics {
		if rt.TopicID != m.topicID {
			m.t.Fatalf("%s: ShareFetch answered for topic %x", m.name, rt.TopicID)
		}
		for i := range rt.Partitions {
			rp := &rt.Partitions[i]
			r.parts[rp.Partition] = [2]int16{rp.ErrorCode, rp.AcknowledgeErrorCode}
			r.recs = append(r.recs, m.decode(rp)...)
		}
	}
	return r
}

// decode returns the records of rp inside its AcquiredRecords ranges.
func (m *wireMember) decode(rp *kmsg.ShareFetchResponseTopicPartition) []got {
	if len(rp.AcquiredRecords) == 0 {
		return nil
	}
	fp := kmsg.NewFetchResponseTopicPartition()
	fp.Partition = rp.Partition
	fp.RecordBatches = rp.Records
	fp.HighWatermark, fp.LastStableOffset, fp.LogStartOffset = -1, -1, -1
	part, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Topic:     m.topic,
		Partition: rp.Partition,
		Offset:    rp.AcquiredRecords[0].FirstOffset,
	}, &fp, kgo.DefaultDecompressor(), nil)
	if part.Err != nil {
		m.t.Fatalf("%s: decode partition %d: %v", m.name, rp.Partition, part.Err)
	}
	var out []got
	for _, rec := range part.Records {
		for _, ar := range rp.AcquiredRecords {
			if rec.Offset >= ar.FirstOffset && rec.Offset <= ar.LastOffset {
				out = append(out, got{p: rp.Partition, off: rec.Offset, key: string(rec.Key), count: ar.DeliveryCount})
			}
		}
	}
	return out
}

// sendAck sends req as built to the member's broker on cl.
func (m *wireMember) sendAck(cl *kgo.Client, req *kmsg.ShareAcknowledgeRequest) ackResult {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wireWait)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.Broker(int(m.broker)))
	if err != nil {
		m.t.Fatalf("%s: ShareAcknowledge: %v", m.name, err)
	}
	r := ackResult{err: resp.ErrorCode, lockMs: resp.AcquisitionLockTimeoutMillis, parts: map[int32]int16{}}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			r.parts[rp.Partition] = rp.ErrorCode
		}
	}
	return r
}

// advance moves the session epoch on after a request at the current
// epoch was answered without a top-level error.
func (m *wireMember) advance(topErr int16) {
	if topErr != 0 {
		return
	}
	switch {
	case m.epoch == -1:
	case m.epoch == 2147483647:
		m.epoch = 1
	default:
		m.epoch++
	}
}

// fetch sends a fetchReq at the session epoch and moves the epoch on.
func (m *wireMember) fetch(max int32, ab ...ackBatch) fetchResult {
	m.t.Helper()
	r := m.sendFetch(m.cl, m.fetchReq(max, ab...))
	m.advance(r.err)
	return r
}

// ack sends a ShareAcknowledge at the session epoch and moves it on.
func (m *wireMember) ack(ab ...ackBatch) ackResult {
	m.t.Helper()
	r := m.sendAck(m.cl, m.ackReq(false, ab...))
	m.advance(r.err)
	return r
}

// renew sends a ShareAcknowledge with IsRenewAck at the session epoch.
func (m *wireMember) renew(ab ...ackBatch) ackResult {
	m.t.Helper()
	r := m.sendAck(m.cl, m.ackReq(true, ab...))
	m.advance(r.err)
	return r
}

// closeSession sends a ShareAcknowledge with epoch -1 and the given acks.
func (m *wireMember) closeSession(ab ...ackBatch) ackResult {
	m.t.Helper()
	req := m.ackReq(false, ab...)
	req.ShareSessionEpoch = -1
	r := m.sendAck(m.cl, req)
	m.epoch = -1
	return r
}

// take fetches (max n per request) until it holds exactly n new records,
// failing on any error, on more than n, or after wireWait.
func (m *wireMember) take(n int) []got {
	m.t.Helper()
	var out []got
	deadline := time.Now().Add(wireWait)
	for len(out) < n {
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: got %v within %v, want %d records", m.name, out, wireWait, n)
		}
		r := m.fetch(int32(n - len(out)))
		m.okFetch(r)
		out = append(out, r.recs...)
	}
	if len(out) != n {
		m.t.Fatalf("%s: got %v, want %d records", m.name, out, n)
	}
	return out
}

// okFetch fails the test on any error code in r.
func (m *wireMember) okFetch(r fetchResult) {
	m.t.Helper()
	if r.err != 0 {
		m.t.Fatalf("%s: ShareFetch: %s", m.name, code(r.err))
	}
	for p, e := range r.parts {
		if e[0] != 0 || e[1] != 0 {
			m.t.Fatalf("%s: ShareFetch partition %d: error %s, ack error %s", m.name, p, code(e[0]), code(e[1]))
		}
	}
}

// okAck fails the test on any error code in r.
func (m *wireMember) okAck(r ackResult) {
	m.t.Helper()
	if r.err != 0 {
		m.t.Fatalf("%s: ShareAcknowledge: %s", m.name, code(r.err))
	}
	for p, e := range r.parts {
		if e != 0 {
			m.t.Fatalf("%s: ShareAcknowledge partition %d: %s", m.name, p, code(e))
		}
	}
}

// offs returns the offsets of recs.
func offs(recs []got) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.off
	}
	return out
}

// waitLag waits (bounded) until the group's lag on topic is want per
// partition; the lag is exact on both brokers, the start offset is not.
func waitLag(t testing.TB, c *kafkatest.Cluster, group, topic string, want map[int32]int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var lag map[int32]int64
	var err error
	for time.Now().Before(deadline) {
		var o offsets
		o, err = describeOffsets(t, c, group, topic)
		if err == nil {
			lag = map[int32]int64{}
			for p, v := range o {
				lag[p] = v[1]
			}
			if maps.Equal(lag, want) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("lag of %s on %s: got %v (err %v), want %v", group, topic, lag, err, want)
}
