package member

// Answers in: what each answer to a request does to the sessions (handle,
// handleSession, sessionFailed) and to the held records: a fetch's
// records become held and delivered (handleFetch, then acquire in
// held.go), and each op a request carried is answered (opsAnswered) or
// queued again (requeue).

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// result is what an I/O goroutine hands back to Run's goroutine: one
// answered request (or its error), by kind.
type result struct {
	kind string                            // "hb", "meta", "session"
	hb   *kmsg.ShareGroupHeartbeatResponse // kind "hb"
	meta *kmsg.MetadataResponse            // kind "meta"
	rq   *request                          // kind "session": the request, and its response in resp
	resp kmsg.Response
	err  error
	// coord is the node a heartbeat went to (kind "hb"); −1: none found.
	coord int32
}

func (m *Member) handle(res result) {
	m.nIO--
	switch res.kind {
	case "hb":
		m.handleHeartbeat(res.hb, res.err, res.coord)
	case "meta":
		m.handleMetadata(res.meta, res.err)
	case "session":
		m.handleSession(res.rq, res.resp, res.err)
	}
}

func isLeaderErr(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

// handleSession takes the answer to one request of a session: it frees the
// session and the credit and room a fetch reserved, and notes whether the
// broker answered (noteReach). A close goes to handleClose; a request that
// failed as a whole to sessionFailed. Otherwise the session's epoch moves
// on, and a fetch brings the session's partitions in line with what it
// named and forgot. A ShareAcknowledge's answer goes per partition to the
// ops it carried (opsDone; a partition left out of the answer succeeded),
// a ShareFetch's to handleFetch.
func (m *Member) handleSession(rq *request, resp kmsg.Response, err error) {
	s := rq.s
	s.busy = false
	if rq.kind == kindFetch {
		m.reserved -= rq.reserved
		m.reservedBytes -= rq.reservedBytes
	}
	var lock time.Duration
	var code int16
	switch resp := resp.(type) {
	case *kmsg.ShareFetchResponse:
		code, lock = resp.ErrorCode, time.Duration(resp.AcquisitionLockTimeoutMillis)*time.Millisecond
	case *kmsg.ShareAcknowledgeResponse:
		code, lock = resp.ErrorCode, time.Duration(resp.AcquisitionLockTimeoutMillis)*time.Millisecond
	}
	if err == nil {
		err = kerr.ErrorForCode(code)
	}
	m.noteReach(peerBroker(s.broker), err)
	if rq.kind == kindClose {
		m.handleClose(rq, resp, err)
		return
	}
	if err != nil {
		m.sessionFailed(rq, err)
		return
	}
	s.errs = 0
	s.epoch = max(1, rq.epoch+1)
	if rq.kind == kindFetch {
		for _, p := range rq.fetched {
			s.parts[p] = true
		}
		for _, p := range rq.forgot {
			delete(s.parts, p)
		}
		if rq.walked && !rq.partial {
			s.syncedPlan = rq.plan
		}
		if rq.epoch == 0 {
			m.st.SessionsOpened++
		}
	}
	switch resp := resp.(type) {
	case *kmsg.ShareFetchResponse:
		m.st.Fetches++
		m.handleFetch(rq, resp, lock)
	case *kmsg.ShareAcknowledgeResponse:
		answered := map[tp]bool{}
		for _, t := range resp.Topics {
			name := m.meta.names[t.TopicID]
			for _, p := range t.Partitions {
				k := tp{name, p.Partition}
				answered[k] = true
				m.opsDone(rq, k, kerr.ErrorForCode(p.ErrorCode), lock)
			}
		}
		for p := range rq.ops {
			if !answered[p] {
				m.opsDone(rq, p, nil, lock)
			}
		}
	}
}

// sessionFailed handles a request that failed as a whole.
func (m *Member) sessionFailed(rq *request, err error) {
	s := rq.s
	s.errs++
	s.backoff = time.Now().Add(backoff(s.errs - 1))
	m.requeue(rq)
	var kind string
	switch {
	case errors.Is(err, kerr.InvalidShareSessionEpoch):
		// The session survives with its records held (facts 8, 9):
		// reopen it and resend.
		kind = "epoch"
		s.backoff = time.Time{}
		m.reset(s)
	case errors.Is(err, kerr.ShareSessionNotFound), !isKerr(err):
		// The session (or its connection) is gone and its records
		// with it.
		kind = "lost"
		m.lose(s, err)
		m.reset(s)
	default:
		kind = err.Error()
		m.reset(s)
		if isLeaderErr(err) {
			m.refreshMetadata()
		}
	}
	level := slog.LevelWarn
	if errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) {
		level = slog.LevelError
	}
	m.logEvery("session:"+kind, level, "member: share request failed", "broker", s.broker, "request", rq.kind, "err", err)
}

func isKerr(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke)
}

func (m *Member) reset(s *session) {
	if s.epoch != 0 {
		m.st.SessionsReset++
	}
	s.epoch = 0
	clear(s.parts)
	s.syncedPlan = 0
}

// handleFetch takes a ShareFetch's answer, partition by partition: the
// acks it carried are answered (opsDone; those of a partition left out of
// the answer succeeded), a partition error asks for Metadata if the leader
// moved, and the records acquired become held and delivered (acquire).
// Then, for the fetch as a whole: the priorities learn what each topic
// gave (when no partition failed), the session notes an empty answer
// (idle.go) or, when only errors came back, backs off; the fetch round
// trip and the mean record size (sized) take in what came; and the records
// delivered are taken from the credit, below 0 when a batch_optimized
// fetch brought more than it asked for.
func (m *Member) handleFetch(rq *request, resp *kmsg.ShareFetchResponse, lock time.Duration) {
	deliveredBefore := len(m.out.Deliveries)
	answered := map[tp]bool{}
	total, failed := 0, 0
	var got map[string]int // records acquired by topic, for the priorities
	if m.prio != nil {
		got = map[string]int{}
	}
	for _, t := range resp.Topics {
		name, ok := m.meta.names[t.TopicID]
		if !ok {
			continue
		}
		for i := range t.Partitions {
			sp := &t.Partitions[i]
			p := tp{name, sp.Partition}
			if _, carried := rq.ops[p]; carried {
				answered[p] = true
				m.opsDone(rq, p, kerr.ErrorForCode(sp.AcknowledgeErrorCode), lock)
			}
			if perr := kerr.ErrorForCode(sp.ErrorCode); perr != nil {
				if isLeaderErr(perr) {
					m.refreshMetadata()
				}
				failed++
				m.logEvery("fetch:"+perr.Error(), slog.LevelWarn, "member: partition fetch failed", "broker", rq.s.broker, "topic", name, "partition", sp.Partition, "err", perr)
				continue
			}
			n := m.acquire(rq, p, sp, lock)
			total += n
			if got != nil {
				got[name] += n
			}
		}
	}
	if got != nil && rq.reserved > 0 && failed == 0 {
		m.prioritize(rq.prioGen, got)
	}
	rq.s.drained = total == 0
	if total == 0 && failed == 0 && rq.reserved > 0 {
		rq.s.empty++
	}
	if failed > 0 && total == 0 {
		// A partition error answers at once: without a pause the
		// session would ask again in a tight loop until the metadata
		// says where the partition went.
		rq.s.errs++
		rq.s.backoff = time.Now().Add(backoff(rq.s.errs - 1))
	}
	for p := range rq.ops {
		if !answered[p] {
			m.opsDone(rq, p, nil, lock)
		}
	}
	if total > 0 {
		rtt := time.Since(rq.sent)
		if m.fetchRTT == 0 {
			m.fetchRTT = rtt
		} else {
			m.fetchRTT = (m.fetchRTT*4 + rtt) / 5
		}
	}
	if n := len(m.out.Deliveries) - deliveredBefore; n > 0 {
		// Past the credit (a batch_optimized fetch took whole producer
		// batches, acquire.go), the credit goes below 0: a debt that the
		// executor, which counts deliveries against its grants, keeps too,
		// and repays with the grants of the jobs that end.
		m.credit -= n
		m.st.OverCredit += int64(max(0, n-rq.reserved))
		var bytes int64
		for _, d := range m.out.Deliveries[deliveredBefore:] {
			bytes += recordBytes(d.Record)
		}
		m.sized(n, bytes)
	}
}

// opsDone answers the ops rq carried for partition p.
func (m *Member) opsDone(rq *request, p tp, err error, lock time.Duration) {
	m.opsAnswered(rq, p, err, lock, false)
}

// opsAnswered answers the ops rq carried for partition p; final answers
// them even if they failed as a list (a close is never resent).
func (m *Member) opsAnswered(rq *request, p tp, err error, lock time.Duration, final bool) {
	offs := rq.ops[p]
	if len(offs) == 0 {
		return
	}
	if err != nil && len(offs) > 1 && !isLeaderErr(err) && !final {
		// All-or-nothing (fact 4): resend the list's ops half at a time
		// (split, takeOps) until the bad ones fail alone.
		var depth int8
		for _, o := range offs {
			if h := m.held.Get(Key{p.topic, p.part, o}); h != nil {
				depth = max(depth, h.split)
			}
		}
		depth = min(depth+1, maxSplit)
		for _, o := range offs {
			if h := m.held.Get(Key{p.topic, p.part, o}); h != nil {
				h.split = depth
			}
		}
		m.requeue(&request{s: rq.s, ops: map[tp][]int64{p: offs}})
		return
	}
	if err != nil && isLeaderErr(err) {
		m.refreshMetadata()
	}
	for _, o := range offs {
		k := Key{p.topic, p.part, o}
		h := m.held.Get(k)
		if h == nil {
			continue
		}
		if h.ackSent {
			if !h.internal && !h.released {
				var aerr error
				if err != nil {
					aerr = fmt.Errorf("member: ack %v %v: %w", AckType(h.ack), k, err)
				}
				m.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: aerr})
			}
			m.drop(k, h)
			continue
		}
		n := h.renewing
		h.renewing = 0
		h.split = 0
		for range n {
			if err != nil {
				m.emitRenewal(Renewal{Key: k, Err: fmt.Errorf("member: renew %v: %w", k, err)})
			} else {
				if lock <= 0 {
					lock = h.d.Lock // a broker that does not report it
				}
				h.d.Deadline = rq.sent.Add(lock)
				h.d.Lock = lock
				m.emitRenewal(Renewal{Key: k, Deadline: h.d.Deadline})
			}
		}
		if err != nil && isLeaderErr(err) {
			m.loseOne(k, h, err)
		}
	}
}

// requeue puts the request's ops back as pending.
func (m *Member) requeue(rq *request) {
	for p, offs := range rq.ops {
		for _, o := range offs {
			k := Key{p.topic, p.part, o}
			h := m.held.Get(k)
			if h == nil {
				continue
			}
			if h.ackSent {
				h.ackSent = false
			} else {
				h.renews += h.renewing
				h.renewing = 0
			}
			rq.s.queue(k, h)
		}
	}
}
