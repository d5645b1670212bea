package member

// Requests out: which request an idle session sends next (turn), and how
// the fetches and acknowledgements are built and sent (launch); their
// answers come back through answers.go.

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// coalesce is how long a session holds back a fetch for a sliver of the
// records in hand, or acknowledgements with no credit to fetch with,
// while jobs in hand are finishing: each one that ends frees credit in a
// moment, and a request sent at once would take the connection (the
// broker serves one request of a connection at a time) for a handful of
// records. Holding fetches large keeps a busy worker's throughput at
// Concurrency ÷ round trip; an idle worker never waits.
const coalesce = 2 * time.Millisecond

type reqKind int

const (
	kindFetch reqKind = iota
	kindAck
	kindRenew
	kindClose
)

func (k reqKind) String() string {
	return [...]string{"fetch", "ack", "renew", "close"}[k]
}

// addPerFetch is the most partitions a fetch adds to its share session.
// Kafka answers a ShareFetch once every partition it adds has its share
// state loaded: on Kafka 4.4.0 13–40 ms for 60 partitions and 200–600 ms
// for 1,200 (BENCHMARKS.md section 9.3). Adding them a hundred at a time,
// each fetch not waiting while more remain, brings the first records of
// a worker on many partitions in tens of milliseconds.
const addPerFetch = 100

// request is one request of a session in flight. Run's goroutine makes
// it and reads it back from the result; the I/O goroutine reads only req.
type request struct {
	s        *session
	kind     reqKind
	epoch    int32          // the session epoch it was sent with
	sent     time.Time      // when it was sent: a lock acquired or renewed by it runs from then
	ops      map[tp][]int64 // offsets whose ops it carries, per partition in ascending order
	reserved int            // a fetch: the credit it may use (MaxRecords)
	fetched  []tp           // a fetch: the partitions in the session once it is answered
	forgot   []tp           // a fetch: the partitions it forgets
	walked   bool           // a fetch: it brought the session's partitions in line with plan
	partial  bool           // a fetch that walked: it left wanted partitions for the next fetch (addPerFetch)
	plan     uint64         // a fetch that walked: the plan it followed
	prioGen  uint64         // a fetch: the priorities' topics it asked for (fetchPriority.gen)
	req      kmsg.Request

	reservedBytes int64 // a fetch: the room it may use (MaxBytes; bytes.go)
}

// turn sends the idle session's next request, if it has one; fetchers is
// the number of sessions that fetch. The first rule that applies chooses:
//
//  1. A session not open (epoch 0) that may fetch opens with a fetch.
//  2. A session not open with ops to send, or holding records (it was
//     reset, facts 8 and 9), opens with a fetch that acquires nothing
//     (sendOpen): a ShareAcknowledge cannot open one, and only an open
//     session can be closed to release its records at the stop.
//  3. Renewals asked go at once, in a ShareAcknowledge (a renewal cannot
//     ride on a fetch that fetches, fact 6), with the acks pending.
//  4. Acks for partitions this session no longer fetches go in a
//     ShareAcknowledge: a fetch carries acks only for what it fetches.
//  5. A fetch, the acks pending piggybacked, when the member may fetch
//     and not both the last fetch came back empty and acks wait (the next
//     would likely wait out MaxWait, and the acks with it). While jobs are
//     in hand, a fetch for less than a quarter of them is held back for up
//     to coalesce, for the credit they are about to free.
//  6. The acks pending, in a ShareAcknowledge; with no credit and jobs in
//     hand, held back for up to coalesce for credit to fetch them with.
func (m *Member) turn(s *session, fetchers int) {
	renews, acksElsewhere := m.pendingKinds(s)
	share := m.share(s, fetchers) // 0: the session may not fetch now
	open, ops := s.epoch > 0, s.pending.Len() > 0
	// Records handed out whose acknowledgements have not been queued:
	// jobs still in hand, in every session, which will free credit as
	// they end. (Not nHeld less this session's pending set: that set
	// holds renewals and gaps too, and not the other sessions' acks.)
	working := m.nHeld - m.nAcked
	mayHold := m.phase == running && working > 0
	switch {
	case !open && share > 0: // 1
		m.sendFetch(s, share)
	case !open && (ops || s.held.len() > 0): // 2
		m.sendOpen(s)
	case renews: // 3
		m.sendAck(s, kindRenew)
	case acksElsewhere: // 4
		m.sendAck(s, kindAck)
	case share > 0 && !(s.drained && ops): // 5
		if mayHold && share < working/4 && s.hold() {
			return
		}
		m.sendFetch(s, share)
	case ops: // 6
		if mayHold && share == 0 && s.hold() {
			return
		}
		m.sendAck(s, kindAck)
	}
}

// pendingKinds reports what the session's pending ops hold: renewals
// (of records with no ack queued), and acks for partitions the session
// does not fetch. It reads the counts queue keeps: a loop over the
// partitions with acks pending, not over the keys.
func (m *Member) pendingKinds(s *session) (renews, acksElsewhere bool) {
	for p := range s.acksIn.all() {
		if m.meta.wantSet[p] != s.broker+1 {
			acksElsewhere = true
			break
		}
	}
	return s.nRenewal > 0, acksElsewhere
}

// share is how many records the session's next fetch may ask for: its
// share of the credit (split evenly between the sessions that fetch),
// within the credit no fetch in flight has reserved, and no more than
// fit in its share of the room for bytes (recordsRoom, bytes.go); 0 when
// the member may not fetch or the session leads no wanted partition.
func (m *Member) share(s *session, fetchers int) int {
	if !m.canFetch() || fetchers == 0 || len(m.meta.want[s.broker]) == 0 {
		return 0
	}
	free, room := m.credit-m.reserved, m.recordsRoom()
	n := max(0, min(free, (m.credit+fetchers-1)/fetchers, room)) // credit below 0 is a debt (handleFetch)
	if m.prio != nil && m.prio.probing {
		n = max(n, min(room, probeRecords)) // a probe fetches past the credit (priority.go)
	}
	return n
}

// hold reports whether the session still holds back its next request
// (for at most coalesce from the first time it did).
func (s *session) hold() bool {
	now := time.Now()
	if s.holdUntil.IsZero() {
		s.holdUntil = now.Add(coalesce)
	}
	return now.Before(s.holdUntil)
}

// ---- building requests ----

// takeOps moves the session's pending ops (acks always; renews when
// renew) into a request, per partition sorted ascending; onlyWanted keeps
// to partitions this session fetches.
func (m *Member) takeOps(s *session, renew, onlyWanted bool) map[tp][]int64 {
	// The set is by partition (KeyMap), with its entries: each key costs
	// a delete, and the counts beside the set and the wanted check move
	// once per partition.
	byPart := map[tp][]int64{}
	rs, slots := m.refs, m.slots
	for _, o := range s.pending.parts {
		p := o.p
		if o.len() == 0 || onlyWanted && m.meta.wantSet[p] != s.broker+1 {
			continue
		}
		rs = rs[:0]
		o.all(func(off int64, h *held) bool {
			if h.queued != opRenewal || renew {
				rs = append(rs, ref{off, h})
			}
			return true
		})
		if len(rs) == 0 {
			continue
		}
		slots = sortRefs(rs, slots)
		send := splitHalf(rs)
		offs := make([]int64, len(send))
		acks := 0
		all := len(send) == o.len()
		if all {
			s.pending.clearPart(o) // unqueue all at once, their counts below
		}
		for i, r := range send {
			offs[i] = r.off
			if !all {
				s.pending.Delete(Key{p.topic, p.part, r.off}) // unqueue, its counts below
			}
			if r.h.queued == opAck {
				acks++
			} else {
				s.nRenewal--
			}
			r.h.queued = 0
			if r.h.ack != opNone {
				r.h.ackSent = true
			} else {
				r.h.renewing, r.h.renews = r.h.renews, 0
			}
		}
		if acks > 0 {
			s.acksIn.add(p, -acks)
		}
		byPart[p] = offs
	}
	clear(rs[:cap(rs)]) // keep no entry past the request
	m.refs, m.slots = rs[:0], slots
	return byPart
}

// ref is a pending op's offset and entry, as takeOps gathers them.
type ref struct {
	off int64
	h   *held
}

// sortRefs sorts rs, distinct offsets of one partition, ascending, and
// returns slots for the next call. The ops of a partition come from its
// pending table, its window's in order and those fallen out of it (far)
// in no order after them; unsorted ones mostly lie within a few fetches'
// offsets: then they are placed by offset into slots, a slice as long as
// their span, in time linear in it (a comparison sort of a few hundred
// ops a request was a tenth of the member's CPU at short jobs). Ops
// spread wider are sorted.
func sortRefs(rs []ref, slots []*held) []*held {
	if len(rs) < 2 || slices.IsSortedFunc(rs, func(a, b ref) int { return cmp.Compare(a.off, b.off) }) {
		return slots // a window's ops come in order; only far ones may not
	}
	lo, hi := rs[0].off, rs[0].off
	for _, r := range rs[1:] {
		lo, hi = min(lo, r.off), max(hi, r.off)
	}
	span := hi - lo + 1
	if span > int64(4*len(rs)) || span > 1<<16 {
		slices.SortFunc(rs, func(a, b ref) int { return cmp.Compare(a.off, b.off) })
		return slots
	}
	if int64(cap(slots)) < span {
		slots = make([]*held, span)
	}
	slots = slots[:span]
	for _, r := range rs {
		slots[r.off-lo] = r.h
	}
	i := 0
	for k, h := range slots {
		if h != nil {
			rs[i] = ref{lo + int64(k), h}
			i++
			slots[k] = nil
		}
	}
	return slots
}

// splitHalf returns the ops of a partition to send, rs sorted by offset:
// all of them, unless some were in a list that failed as a whole (split);
// then the first half (rounded up) of those of the deepest split, the
// others waiting. A half that fails is split again; one that succeeds
// leaves the bad ops in the other half.
func splitHalf(rs []ref) []ref {
	var depth int8
	for _, r := range rs {
		depth = max(depth, r.h.split)
	}
	if depth == 0 {
		return rs
	}
	group := make([]ref, 0, len(rs))
	for _, r := range rs {
		if r.h.split == depth {
			group = append(group, r)
		}
	}
	return group[:(len(group)+1)/2]
}

type ackBatch struct {
	first, last int64
	types       []int8
}

func (m *Member) batches(p tp, offs []int64) []ackBatch {
	var out []ackBatch
	for _, o := range offs {
		h := m.held.Get(Key{p.topic, p.part, o})
		t := h.ack
		if t == opNone {
			t = opRenew
		}
		if n := len(out); n > 0 && out[n-1].last+1 == o {
			out[n-1].last = o
			out[n-1].types = append(out[n-1].types, t)
			continue
		}
		out = append(out, ackBatch{first: o, last: o, types: []int8{t}})
	}
	for i := range out {
		if same(out[i].types) {
			out[i].types = out[i].types[:1]
		}
	}
	return out
}

func same(ts []int8) bool {
	for _, t := range ts[1:] {
		if t != ts[0] {
			return false
		}
	}
	return true
}

func (m *Member) strp(s string) *string { return &s }

// sendFetch sends the session's ShareFetch for up to share records: it
// waits up to MaxWait (not at all for a priorities' probe), in the acquire
// mode acquire.go chooses, for bytes sized by the room (sizeFetch). It
// names the wanted partitions the broker's session lacks, and forgets
// those no longer wanted (forgettable), only when they may differ from the
// session's (syncedPlan, forgetDue), at most addPerFetch of them a fetch
// (the others in the next fetches, this one not waiting), and on an open
// session it carries the acks pending for the partitions it fetches. It
// reserves share of the credit until the answer (handleSession).
func (m *Member) sendFetch(s *session, share int) {
	rq := &request{s: s, kind: kindFetch, epoch: s.epoch, reserved: share}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = m.strp(m.cfg.Group)
	req.MemberID = m.strp(m.cfg.MemberID)
	req.ShareSessionEpoch = s.epoch
	req.MaxWaitMillis = int32(m.cfg.MaxWait / time.Millisecond)
	if m.prio != nil {
		rq.prioGen = m.prio.gen
		if m.prio.probing {
			req.MaxWaitMillis = 0 // a probe: what the urgent topics have now
		}
	}
	req.MinBytes = 1
	req.MaxBytes = 50 << 20
	req.MaxRecords = int32(share)
	req.BatchSize = int32(share)
	req.ShareAcquireMode = m.acquireMode(s, share) // acquire.go
	parts := map[tp]*kmsg.ShareFetchRequestTopicPartition{}
	topics := map[string]int{}
	add := func(p tp) *kmsg.ShareFetchRequestTopicPartition {
		if fp := parts[p]; fp != nil {
			return fp
		}
		ti, ok := topics[p.topic]
		if !ok {
			ti = len(req.Topics)
			topics[p.topic] = ti
			req.Topics = append(req.Topics, kmsg.ShareFetchRequestTopic{TopicID: m.meta.ids[p.topic]})
		}
		t := &req.Topics[ti]
		t.Partitions = append(t.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p.part, PartitionMaxBytes: 10 << 20})
		return &t.Partitions[len(t.Partitions)-1]
	}
	// The wanted partitions and the session's are walked only when they
	// may differ: the session (re)opens, the plan changed, or a partition
	// became one to forget. Otherwise the broker's session already holds
	// what this one fetches.
	walk := s.epoch == 0 || s.syncedPlan == 0 || s.syncedPlan != m.meta.plan || s.forgetDue
	if walk {
		rq.walked, rq.plan = true, m.meta.plan
		s.forgetDue = false
		added := 0
		for _, p := range m.meta.want[s.broker] {
			if s.epoch == 0 || !s.parts[p] {
				if added == addPerFetch {
					// The rest in the next fetches, at once: the broker
					// answers a fetch only once each partition it adds
					// has its share state loaded, which on a new session
					// of a thousand partitions takes it hundreds of ms.
					rq.partial = true
					req.MaxWaitMillis = 0
					continue
				}
				added++
				add(p)
			}
			rq.fetched = append(rq.fetched, p)
		}
	}
	if s.epoch > 0 {
		rq.ops = m.takeOps(s, false, true)
		for p, offs := range rq.ops {
			// Re-find after appends may have moved the slices.
			_ = add(p)
			for _, b := range m.batches(p, offs) {
				fp := m.findFetchPart(req, p)
				fp.AcknowledgementBatches = append(fp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{
					FirstOffset: b.first, LastOffset: b.last, AcknowledgeTypes: b.types,
				})
			}
		}
		for p := range s.parts {
			if !walk {
				break
			}
			if m.forgettable(s, p) {
				rq.forgot = append(rq.forgot, p)
				req.ForgottenTopicsData = appendForgotten(req.ForgottenTopicsData, m.meta.ids[p.topic], p.part)
			}
		}
	}
	m.reserved += share
	m.sizeFetch(rq, req)
	rq.req = req
	m.launch(rq, context.Background())
}

func (m *Member) findFetchPart(req *kmsg.ShareFetchRequest, p tp) *kmsg.ShareFetchRequestTopicPartition {
	id := m.meta.ids[p.topic]
	for i := range req.Topics {
		if req.Topics[i].TopicID != id {
			continue
		}
		for j := range req.Topics[i].Partitions {
			if req.Topics[i].Partitions[j].Partition == p.part {
				return &req.Topics[i].Partitions[j]
			}
		}
	}
	panic("member: partition missing from its own request")
}

func appendForgotten(f []kmsg.ShareFetchRequestForgottenTopicsData, id [16]byte, part int32) []kmsg.ShareFetchRequestForgottenTopicsData {
	for i := range f {
		if f[i].TopicID == id {
			f[i].Partitions = append(f[i].Partitions, part)
			return f
		}
	}
	return append(f, kmsg.ShareFetchRequestForgottenTopicsData{TopicID: id, Partitions: []int32{part}})
}

// sendOpen opens a session that has acks to send but may not fetch: a
// ShareFetch with epoch 0 and no partitions acquires nothing, and acks for
// partitions outside a session apply (kfake and Kafka; an IsRenewAck
// ShareFetch with epoch 0 is INVALID_REQUEST on kfake).
func (m *Member) sendOpen(s *session) {
	rq := &request{s: s, kind: kindFetch, epoch: 0}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = m.strp(m.cfg.Group)
	req.MemberID = m.strp(m.cfg.MemberID)
	req.MaxWaitMillis, req.MinBytes, req.MaxRecords, req.BatchSize, req.ShareAcquireMode = 0, 0, 1, 1, 1
	rq.req = req
	m.launch(rq, context.Background())
}

func (m *Member) buildAck(s *session, epoch int32, renew bool, ops map[tp][]int64) *kmsg.ShareAcknowledgeRequest {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID = m.strp(m.cfg.Group)
	req.MemberID = m.strp(m.cfg.MemberID)
	req.ShareSessionEpoch = epoch
	req.IsRenewAck = renew
	parts := slices.SortedFunc(func(yield func(tp) bool) {
		for p := range ops {
			if !yield(p) {
				return
			}
		}
	}, func(a, b tp) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part)) })
	for _, p := range parts {
		id := m.meta.ids[p.topic]
		ti := slices.IndexFunc(req.Topics, func(t kmsg.ShareAcknowledgeRequestTopic) bool { return t.TopicID == id })
		if ti < 0 {
			ti = len(req.Topics)
			req.Topics = append(req.Topics, kmsg.ShareAcknowledgeRequestTopic{TopicID: id})
		}
		ap := kmsg.ShareAcknowledgeRequestTopicPartition{Partition: p.part}
		for _, b := range m.batches(p, ops[p]) {
			ap.AcknowledgementBatches = append(ap.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
				FirstOffset: b.first, LastOffset: b.last, AcknowledgeTypes: b.types,
			})
		}
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, ap)
	}
	return req
}

func (m *Member) sendAck(s *session, kind reqKind) {
	rq := &request{s: s, kind: kind, epoch: s.epoch}
	rq.ops = m.takeOps(s, kind == kindRenew, false)
	rq.req = m.buildAck(s, s.epoch, kind == kindRenew, rq.ops)
	m.launch(rq, context.Background())
}

func (m *Member) launch(rq *request, ctx context.Context) {
	rq.s.busy = true
	rq.s.holdUntil = time.Time{}
	rq.sent = time.Now()
	m.nIO++
	cl := m.cfg.Client
	timeout := m.cfg.MaxWait + 30*time.Second
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := cl.Broker(int(rq.s.broker)).Request(ctx, rq.req)
		m.results <- result{kind: "session", rq: rq, resp: resp, err: err}
	}()
}
