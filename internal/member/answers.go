package member

import (
	"cmp"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ---- responses ----

func (m *Member) handle(res result) {
	m.nIO--
	switch res.kind {
	case "hb":
		m.handleHeartbeat(res.hb, res.err)
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
		if rq.walked {
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

// acquire records the partition's acquired records as held and queues
// their deliveries; it returns the number of offsets acquired.
func (m *Member) acquire(rq *request, p tp, sp *kmsg.ShareFetchResponseTopicPartition, lock time.Duration) int {
	if len(sp.AcquiredRecords) == 0 {
		return 0
	}
	acquired := slices.Clone(sp.AcquiredRecords)
	slices.SortFunc(acquired, func(a, b kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	recs := m.dec.records(p, sp.Records, acquired)
	m.acquiredNow(rq.s, p, time.Now())
	n, total := 0, len(recs)
	// The new entries of held come from one slab per fetch rather than
	// one allocation each: a slab lives while any of its entries is
	// held, which the credit bounds.
	var slab []held
	deadline := rq.sent.Add(lock)
	s := rq.s
	for _, a := range acquired {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			f := recs[n]
			rec := f.rec
			n++
			k := Key{p.topic, p.part, o}
			h := m.held[k]
			if h != nil && h.broker != s.broker {
				// Held in another session (a leader move): that one is gone.
				m.loseOne(k, h, errors.New("partition moved"))
				h = nil
			}
			if h == nil {
				if len(slab) == 0 {
					slab = make([]held, total-n+1)
				}
				h = &slab[0]
				slab = slab[1:]
				*h = held{ack: opNone, broker: s.broker}
				m.held[k] = h
				s.held[p]++
			} else {
				m.count(h, -1)
			}
			m.st.Fetched++
			if rec != nil && !h.internal && h.ack != opNone {
				// Its job ended, but its lock ran out before the ack
				// went (a failed list resent op by op, a session
				// reopened): the broker gave it again, to this session.
				// Acks are by offset, so the queued one answers for this
				// delivery too; delivering it would run the job again
				// only for its ack to be refused here (the record has
				// an ack queued).
				h.d.Count, h.d.Deadline, h.d.Lock = int32(a.DeliveryCount), deadline, lock
				m.count(h, 1)
				m.st.Reacquired++
				continue
			}
			h.d = Delivery{Record: rec, Count: int32(a.DeliveryCount), Deadline: deadline, Lock: lock}
			h.internal = false
			m.deliveredFrom(h, f.b)
			switch {
			case rec == nil:
				// An offset with no record (a control record or a gap).
				h.internal, h.ack, h.ackSent = true, opGap, false
				s.queue(k, h)
			default:
				// Even past the credit (a batch_optimized fetch gave
				// more than MaxRecords): a release would cost a
				// delivery, and archive a last one, so deliver it; the
				// credit goes below 0 (handleFetch).
				h.size = recordBytes(rec)
				m.count(h, 1)
				m.out.Deliveries = append(m.out.Deliveries, h.d)
			}
		}
	}
	return n
}
