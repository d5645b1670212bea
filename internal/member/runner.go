package member

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Ack operation codes on the wire, plus "none".
const (
	opNone   int8 = -1
	opGap    int8 = 0
	opRenew  int8 = 4
	closeTTL      = 3 * time.Second
)

type tp struct {
	topic string
	part  int32
}

// held is one acquired offset: a delivery, or an offset the member acks
// itself (internal: a gap with no record).
type held struct {
	d        Delivery
	broker   int32
	internal bool
	released bool // a RELEASE the member sends itself on close: no result
	ack      int8 // terminal ack queued or sent, opNone if none
	ackSent  bool
	solo     bool
	renews   int // renewals asked and not yet sent
	renewing int // renewals in flight
}

type session struct {
	broker  int32
	epoch   int32
	parts   map[tp]bool
	pending map[Key]bool // held keys with an op not yet sent
	busy    bool
	closed  bool
	backoff time.Time
	errs    int
	// drained: the session's last fetch acquired nothing, so the next
	// one will likely wait out MaxWait: acks go alone rather than wait
	// on it.
	drained bool
	// holdUntil: the session waits for more credit (or a fetch to carry
	// its acks) until then; see coalesce.
	holdUntil time.Time
}

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

type request struct {
	s        *session
	kind     reqKind
	epoch    int32
	sent     time.Time
	ops      map[tp][]int64 // offsets whose ops this request carries
	reserved int
	fetched  []tp
	forgot   []tp
	req      kmsg.Request
}

// result is what an I/O goroutine hands back to Run's goroutine.
type result struct {
	rq   *request // a session request
	hb   *kmsg.ShareGroupHeartbeatResponse
	meta *kmsg.MetadataResponse
	kind string // "hb", "meta", "session"
	resp kmsg.Response
	err  error
}

type runner struct {
	m   *Member
	cfg Config
	log *slog.Logger

	ioCtx    context.Context // heartbeats and metadata: cancelled on a hard stop
	ioCancel context.CancelFunc
	results  chan result
	nIO      int

	// Membership.
	state      State
	epoch      int32
	interval   time.Duration
	hbBusy     bool
	hbDue      time.Time
	hbErrs     int
	assigned   map[[16]byte][]int32
	everJoined bool
	// resubscribe names topics found re-created under a new ID: the next
	// heartbeat subscribes without them and the one after with them
	// again, so a coordinator that assigns by topic ID (kfake does not
	// notice a re-created topic by itself) assigns the new one.
	resubscribe []string

	// Metadata.
	names    map[[16]byte]string
	ids      map[string][16]byte
	leaders  map[tp]int32
	metaBusy bool
	metaDue  time.Time // zero: not wanted
	want     map[int32][]tp
	wantSet  map[tp]int32

	sessions map[int32]*session
	held     map[Key]*held
	nHeld    int

	credit   int
	reserved int
	stopped  bool
	leaving  bool
	quiet    bool
	closing  bool

	out      Event
	outAny   bool
	logged   map[string]time.Time
	st       Stats
	dec      *decoder
	fetchRTT time.Duration
	// fatal ends Run: the coordinator refused the member for want of an
	// ACL before it ever joined (a member that joined keeps retrying, so
	// a revoked and re-granted ACL does not stop a running worker).
	fatal error
}

func newRunner(m *Member) *runner {
	return &runner{
		m:        m,
		cfg:      m.cfg,
		log:      m.log,
		results:  make(chan result, 16),
		assigned: map[[16]byte][]int32{},
		names:    map[[16]byte]string{},
		ids:      map[string][16]byte{},
		leaders:  map[tp]int32{},
		want:     map[int32][]tp{},
		wantSet:  map[tp]int32{},
		sessions: map[int32]*session{},
		held:     map[Key]*held{},
		logged:   map[string]time.Time{},
		st:       Stats{MemberID: m.cfg.MemberID, Acks: map[AckType]int64{}},
		dec:      newDecoder(),
		interval: time.Second,
	}
}

func (r *runner) run(ctx context.Context) error {
	r.ioCtx, r.ioCancel = context.WithCancel(context.Background())
	defer r.ioCancel()
	r.metaDue = time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.step()
		r.publish()
		if r.closing && r.sessionsIdle() {
			return r.finish(ctx)
		}
		var out chan<- Event
		if r.outAny {
			out = r.m.events
		}
		timer.Reset(r.nextWake())
		select {
		case <-ctx.Done():
			r.hardStop()
			return ctx.Err()
		case <-r.m.wake:
			r.mailbox()
		case res := <-r.results:
			r.handle(res)
			if r.fatal != nil {
				r.hardStop()
				return r.fatal
			}
		case out <- r.out:
			r.out, r.outAny = Event{}, false
		case <-timer.C:
		}
	}
}

// ---- the mailbox ----

func (r *runner) mailbox() {
	b := r.m.take()
	if !b.anything {
		return
	}
	r.credit += b.grant
	if b.stop && !r.stopped {
		r.stopped = true
		r.log.Debug("member: stop fetching")
	}
	for _, k := range b.renews {
		h := r.held[k]
		if h == nil || h.internal || h.ack != opNone || r.closing {
			r.emitRenewal(Renewal{Key: k, Err: ErrNotHeld})
			continue
		}
		h.renews++
		r.sessions[h.broker].pending[k] = true
	}
	for _, a := range b.acks {
		h := r.held[a.k]
		if h == nil || h.internal || h.ack != opNone || r.closing || a.t < Accept || a.t > Reject {
			err := ErrNotHeld
			if h != nil && (a.t < Accept || a.t > Reject) {
				err = fmt.Errorf("member: ack %v of %v: unknown type", a.t, a.k)
			}
			r.emitAck(AckResult{Key: a.k, Type: a.t, Err: err})
			continue
		}
		h.ack = int8(a.t)
		if h.renews > 0 {
			// The job ended: renewals not yet sent are moot.
			for range h.renews {
				r.emitRenewal(Renewal{Key: a.k, Err: ErrNotHeld})
			}
			h.renews = 0
		}
		r.sessions[h.broker].pending[a.k] = true
	}
	if b.leave && !r.leaving {
		r.leaving = true
		r.log.Debug("member: leave")
	}
}

// ---- events ----

func (r *runner) emitAck(a AckResult) {
	r.out.Acked = append(r.out.Acked, a)
	r.outAny = true
	if a.Err == nil {
		r.st.Acks[a.Type]++
	} else {
		r.st.AckErrors++
	}
}

func (r *runner) emitRenewal(rn Renewal) {
	r.out.Renewals = append(r.out.Renewals, rn)
	r.outAny = true
	r.st.Renewals++
	if rn.Err != nil {
		r.st.RenewErrors++
	}
}

func (r *runner) emitLost(k Key) {
	r.out.Lost = append(r.out.Lost, k)
	r.outAny = true
	r.st.LostRecords++
}

func (r *runner) publish() {
	r.st.State = r.state
	r.st.Epoch = r.epoch
	n := 0
	for _, ps := range r.assigned {
		n += len(ps)
	}
	r.st.Partitions = n
	r.st.Held = r.nHeld
	r.st.Credit = r.credit
	r.st.FetchRTT = r.fetchRTT
	r.m.statsMu.Lock()
	acks := r.m.stats.Acks
	r.m.stats = r.st
	for t, v := range r.st.Acks {
		acks[t] = v
	}
	r.m.stats.Acks = acks
	r.m.statsMu.Unlock()
}

// logEvery logs msg at level at most once a minute per kind.
func (r *runner) logEvery(kind string, level slog.Level, msg string, args ...any) {
	now := time.Now()
	if t, ok := r.logged[kind]; ok && now.Sub(t) < time.Minute {
		r.log.Debug(msg, args...)
		return
	}
	r.logged[kind] = now
	r.log.Log(context.Background(), level, msg, args...)
}

// ---- scheduling ----

func (r *runner) nextWake() time.Duration {
	now := time.Now()
	next := now.Add(time.Minute)
	if !r.hbBusy && !r.closing && r.hbDue.Before(next) {
		next = r.hbDue
	}
	if !r.metaBusy && !r.metaDue.IsZero() && r.metaDue.Before(next) {
		next = r.metaDue
	}
	for _, s := range r.sessions {
		if !s.busy && s.backoff.After(now) && s.backoff.Before(next) {
			next = s.backoff
		}
		if !s.busy && s.holdUntil.After(now) && s.holdUntil.Before(next) {
			next = s.holdUntil
		}
	}
	return max(100*time.Microsecond, next.Sub(now))
}

func backoff(errs int) time.Duration {
	d := 100 * time.Millisecond << min(errs, 5)
	return min(d, 2*time.Second)
}

func (r *runner) step() {
	now := time.Now()
	if !r.closing && !r.hbBusy && !now.Before(r.hbDue) {
		r.sendHeartbeat()
	}
	if !r.metaBusy && !r.metaDue.IsZero() && !now.Before(r.metaDue) && !r.closing {
		r.sendMetadata()
	}
	if r.leaving && !r.closing && r.sessionsIdle() {
		r.closing = true
		for _, s := range r.sessions {
			if s.epoch > 0 && !s.closed {
				r.sendClose(s, r.ioCtx)
			}
		}
	}
	if !r.closing {
		fetchers := 0
		if r.canFetch() {
			for b, ps := range r.want {
				if len(ps) > 0 {
					fetchers++
					r.session(b)
				}
			}
		}
		for _, s := range r.sessions {
			if !s.busy && !now.Before(s.backoff) {
				r.turn(s, fetchers)
			}
		}
	}
	if r.stopped && !r.quiet && !r.fetching() && len(r.out.Deliveries) == 0 {
		r.quiet = true
		close(r.m.quiet)
	}
}

func (r *runner) canFetch() bool {
	return r.state == Joined && !r.stopped && !r.leaving
}

func (r *runner) fetching() bool { return r.reserved > 0 || r.anyFetchBusy() }

func (r *runner) anyFetchBusy() bool {
	for _, s := range r.sessions {
		if s.busy && s.epoch == 0 && !s.closed {
			// An opening request may acquire records.
			return true
		}
	}
	return false
}

func (r *runner) sessionsIdle() bool {
	for _, s := range r.sessions {
		if s.busy {
			return false
		}
	}
	return true
}

func (r *runner) session(b int32) *session {
	s := r.sessions[b]
	if s == nil {
		s = &session{broker: b, parts: map[tp]bool{}, pending: map[Key]bool{}}
		r.sessions[b] = s
	}
	return s
}

// turn sends the session's next request, if it has one.
func (r *runner) turn(s *session, fetchers int) {
	var renews, ackNotWanted bool
	for k := range s.pending {
		h := r.held[k]
		if h.ack == opNone && h.renews > 0 {
			renews = true
		}
		if h.ack != opNone && r.wantSet[tp{k.Topic, k.Partition}] != s.broker+1 {
			ackNotWanted = true
		}
	}
	free := r.credit - r.reserved
	share := 0
	if r.canFetch() && fetchers > 0 && len(r.want[s.broker]) > 0 {
		share = min(free, (r.credit+fetchers-1)/fetchers)
	}
	// Records handed out whose acknowledgements have not been queued:
	// jobs still in hand, which will free credit as they end.
	working := r.nHeld - len(s.pending)
	mayHold := !r.stopped && !r.leaving && working > 0
	switch {
	case s.epoch == 0 && share > 0:
		r.sendFetch(s, share)
	case s.epoch == 0 && len(s.pending) > 0:
		r.sendOpen(s)
	case renews:
		r.sendAck(s, kindRenew)
	case ackNotWanted && len(s.pending) > 0:
		r.sendAck(s, kindAck)
	case share > 0 && !(s.drained && len(s.pending) > 0):
		if mayHold && share < working/4 && s.hold() {
			return
		}
		r.sendFetch(s, share)
	case len(s.pending) > 0:
		if mayHold && share == 0 && s.hold() {
			return
		}
		r.sendAck(s, kindAck)
	}
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
func (r *runner) takeOps(s *session, renew, onlyWanted bool) map[tp][]int64 {
	byPart := map[tp][]int64{}
	for k := range s.pending {
		h := r.held[k]
		p := tp{k.Topic, k.Partition}
		if onlyWanted && r.wantSet[p] != s.broker+1 {
			continue
		}
		if h.ack == opNone && !renew {
			continue
		}
		byPart[p] = append(byPart[p], k.Offset)
	}
	for p, offs := range byPart {
		slices.Sort(offs)
		// A partition whose list failed as a whole sends its acks alone.
		for _, o := range offs {
			if r.held[Key{p.topic, p.part, o}].solo {
				offs = []int64{o}
				break
			}
		}
		byPart[p] = offs
		for _, o := range offs {
			k := Key{p.topic, p.part, o}
			h := r.held[k]
			delete(s.pending, k)
			if h.ack != opNone {
				h.ackSent = true
			} else {
				h.renewing, h.renews = h.renews, 0
			}
		}
	}
	return byPart
}

type ackBatch struct {
	first, last int64
	types       []int8
}

func (r *runner) batches(p tp, offs []int64) []ackBatch {
	var out []ackBatch
	for _, o := range offs {
		h := r.held[Key{p.topic, p.part, o}]
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

func (r *runner) strp(s string) *string { return &s }

func (r *runner) sendFetch(s *session, share int) {
	rq := &request{s: s, kind: kindFetch, epoch: s.epoch, reserved: share}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = r.strp(r.cfg.Group)
	req.MemberID = r.strp(r.cfg.MemberID)
	req.ShareSessionEpoch = s.epoch
	req.MaxWaitMillis = int32(r.cfg.MaxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = 50 << 20
	req.MaxRecords = int32(share)
	req.BatchSize = int32(share)
	req.ShareAcquireMode = 1
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
			req.Topics = append(req.Topics, kmsg.ShareFetchRequestTopic{TopicID: r.ids[p.topic]})
		}
		t := &req.Topics[ti]
		t.Partitions = append(t.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p.part, PartitionMaxBytes: 10 << 20})
		return &t.Partitions[len(t.Partitions)-1]
	}
	for _, p := range r.want[s.broker] {
		if s.epoch == 0 || !s.parts[p] {
			add(p)
		}
		rq.fetched = append(rq.fetched, p)
	}
	if s.epoch > 0 {
		rq.ops = r.takeOps(s, false, true)
		for p, offs := range rq.ops {
			// Re-find after appends may have moved the slices.
			_ = add(p)
			for _, b := range r.batches(p, offs) {
				fp := r.findFetchPart(req, p)
				fp.AcknowledgementBatches = append(fp.AcknowledgementBatches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{
					FirstOffset: b.first, LastOffset: b.last, AcknowledgeTypes: b.types,
				})
			}
		}
		for p := range s.parts {
			if r.wantSet[p] != s.broker+1 && !r.holdsIn(s, p) {
				rq.forgot = append(rq.forgot, p)
				req.ForgottenTopicsData = appendForgotten(req.ForgottenTopicsData, r.ids[p.topic], p.part)
			}
		}
	}
	r.reserved += share
	rq.req = req
	r.launch(rq, context.Background())
}

func (r *runner) findFetchPart(req *kmsg.ShareFetchRequest, p tp) *kmsg.ShareFetchRequestTopicPartition {
	id := r.ids[p.topic]
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

func (r *runner) holdsIn(s *session, p tp) bool {
	for k, h := range r.held {
		if h.broker == s.broker && k.Topic == p.topic && k.Partition == p.part {
			return true
		}
	}
	return false
}

// sendOpen opens a session that has acks to send but may not fetch: a
// ShareFetch with epoch 0 and no partitions acquires nothing, and acks for
// partitions outside a session apply (kfake and Kafka; an IsRenewAck
// ShareFetch with epoch 0 is INVALID_REQUEST on kfake).
func (r *runner) sendOpen(s *session) {
	rq := &request{s: s, kind: kindFetch, epoch: 0}
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID = r.strp(r.cfg.Group)
	req.MemberID = r.strp(r.cfg.MemberID)
	req.MaxWaitMillis, req.MinBytes, req.MaxRecords, req.BatchSize, req.ShareAcquireMode = 0, 0, 1, 1, 1
	rq.req = req
	r.launch(rq, context.Background())
}

func (r *runner) buildAck(s *session, epoch int32, renew bool, ops map[tp][]int64) *kmsg.ShareAcknowledgeRequest {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID = r.strp(r.cfg.Group)
	req.MemberID = r.strp(r.cfg.MemberID)
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
		id := r.ids[p.topic]
		ti := slices.IndexFunc(req.Topics, func(t kmsg.ShareAcknowledgeRequestTopic) bool { return t.TopicID == id })
		if ti < 0 {
			ti = len(req.Topics)
			req.Topics = append(req.Topics, kmsg.ShareAcknowledgeRequestTopic{TopicID: id})
		}
		ap := kmsg.ShareAcknowledgeRequestTopicPartition{Partition: p.part}
		for _, b := range r.batches(p, ops[p]) {
			ap.AcknowledgementBatches = append(ap.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{
				FirstOffset: b.first, LastOffset: b.last, AcknowledgeTypes: b.types,
			})
		}
		req.Topics[ti].Partitions = append(req.Topics[ti].Partitions, ap)
	}
	return req
}

func (r *runner) sendAck(s *session, kind reqKind) {
	rq := &request{s: s, kind: kind, epoch: s.epoch}
	rq.ops = r.takeOps(s, kind == kindRenew, false)
	rq.req = r.buildAck(s, s.epoch, kind == kindRenew, rq.ops)
	r.launch(rq, context.Background())
}

// sendClose closes the session (epoch −1) with its pending acks plus
// RELEASE for every held record not acknowledged.
func (r *runner) sendClose(s *session, ctx context.Context) {
	rq := &request{s: s, kind: kindClose, epoch: -1, ops: map[tp][]int64{}}
	for k, h := range r.held {
		if h.broker != s.broker {
			continue
		}
		if h.ack == opNone {
			h.ack = int8(Release)
			h.released = true
			for range h.renews {
				r.emitRenewal(Renewal{Key: k, Err: ErrNotHeld})
			}
			h.renews = 0
		}
		if h.ackSent {
			continue // answered by the request in flight
		}
		h.ackSent = true
		delete(s.pending, k)
		p := tp{k.Topic, k.Partition}
		rq.ops[p] = append(rq.ops[p], k.Offset)
	}
	for _, offs := range rq.ops {
		slices.Sort(offs)
	}
	rq.req = r.buildAck(s, -1, false, rq.ops)
	s.closed = true
	r.launch(rq, ctx)
}

func (r *runner) launch(rq *request, ctx context.Context) {
	rq.s.busy = true
	rq.s.holdUntil = time.Time{}
	rq.sent = time.Now()
	r.nIO++
	cl := r.cfg.Client
	timeout := r.cfg.MaxWait + 30*time.Second
	go func() {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := cl.Broker(int(rq.s.broker)).Request(ctx, rq.req)
		r.results <- result{kind: "session", rq: rq, resp: resp, err: err}
	}()
}

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

// ---- responses ----

func (r *runner) handle(res result) {
	r.nIO--
	switch res.kind {
	case "hb":
		r.handleHeartbeat(res.hb, res.err)
	case "meta":
		r.handleMetadata(res.meta, res.err)
	case "session":
		r.handleSession(res.rq, res.resp, res.err)
	}
}

func isLeaderErr(err error) bool {
	return errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

func (r *runner) handleSession(rq *request, resp kmsg.Response, err error) {
	s := rq.s
	s.busy = false
	if rq.kind == kindFetch {
		r.reserved -= rq.reserved
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
	if rq.kind == kindClose {
		r.handleClose(rq, resp, err)
		return
	}
	if err != nil {
		r.sessionFailed(rq, err)
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
		if rq.epoch == 0 {
			r.st.SessionsOpened++
		}
	}
	switch resp := resp.(type) {
	case *kmsg.ShareFetchResponse:
		r.st.Fetches++
		r.handleFetch(rq, resp, lock)
	case *kmsg.ShareAcknowledgeResponse:
		answered := map[tp]bool{}
		for _, t := range resp.Topics {
			name := r.names[t.TopicID]
			for _, p := range t.Partitions {
				k := tp{name, p.Partition}
				answered[k] = true
				r.opsDone(rq, k, kerr.ErrorForCode(p.ErrorCode), lock)
			}
		}
		for p := range rq.ops {
			if !answered[p] {
				r.opsDone(rq, p, nil, lock)
			}
		}
	}
}

// sessionFailed handles a request that failed as a whole.
func (r *runner) sessionFailed(rq *request, err error) {
	s := rq.s
	s.errs++
	s.backoff = time.Now().Add(backoff(s.errs - 1))
	r.requeue(rq)
	var kind string
	switch {
	case errors.Is(err, kerr.InvalidShareSessionEpoch):
		// The session survives with its records held (facts 8, 9):
		// reopen it and resend.
		kind = "epoch"
		s.backoff = time.Time{}
		r.reset(s)
	case errors.Is(err, kerr.ShareSessionNotFound), !isKerr(err):
		// The session (or its connection) is gone and its records
		// with it.
		kind = "lost"
		r.lose(s, err)
		r.reset(s)
	default:
		kind = err.Error()
		r.reset(s)
		if isLeaderErr(err) {
			r.refreshMetadata()
		}
	}
	level := slog.LevelWarn
	if errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) {
		level = slog.LevelError
	}
	r.logEvery("session:"+kind, level, "member: share request failed", "broker", s.broker, "request", rq.kind, "err", err)
}

func isKerr(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke)
}

func (r *runner) reset(s *session) {
	if s.epoch != 0 {
		r.st.SessionsReset++
	}
	s.epoch = 0
	clear(s.parts)
}

// requeue puts the request's ops back as pending.
func (r *runner) requeue(rq *request) {
	for p, offs := range rq.ops {
		for _, o := range offs {
			k := Key{p.topic, p.part, o}
			h := r.held[k]
			if h == nil {
				continue
			}
			if h.ackSent {
				h.ackSent = false
			} else {
				h.renews += h.renewing
				h.renewing = 0
			}
			rq.s.pending[k] = true
		}
	}
}

// lose drops every record held in s, reporting it lost and answering its
// queued ops.
func (r *runner) lose(s *session, cause error) {
	for k, h := range r.held {
		if h.broker != s.broker {
			continue
		}
		r.loseOne(k, h, cause)
	}
}

func (r *runner) loseOne(k Key, h *held, cause error) {
	err := fmt.Errorf("%w: lock lost: %v", ErrNotHeld, cause)
	if !h.internal && !h.released {
		if h.ack != opNone {
			r.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: err})
		} else {
			r.emitLost(k)
		}
		for range h.renews + h.renewing {
			r.emitRenewal(Renewal{Key: k, Err: err})
		}
	}
	r.drop(k, h)
}

func (r *runner) drop(k Key, h *held) {
	delete(r.held, k)
	if s := r.sessions[h.broker]; s != nil {
		delete(s.pending, k)
	}
	if !h.internal {
		r.nHeld--
	}
}

// opsDone answers the ops rq carried for partition p.
func (r *runner) opsDone(rq *request, p tp, err error, lock time.Duration) {
	r.opsAnswered(rq, p, err, lock, false)
}

// opsAnswered answers the ops rq carried for partition p; final answers
// them even if they failed as a list (a close is never resent).
func (r *runner) opsAnswered(rq *request, p tp, err error, lock time.Duration, final bool) {
	offs := rq.ops[p]
	if len(offs) == 0 {
		return
	}
	if err != nil && len(offs) > 1 && !isLeaderErr(err) && !final {
		// All-or-nothing (fact 4): resend each op of the partition alone.
		for _, o := range offs {
			if h := r.held[Key{p.topic, p.part, o}]; h != nil {
				h.solo = true
			}
		}
		r.requeue(&request{s: rq.s, ops: map[tp][]int64{p: offs}})
		return
	}
	if err != nil && isLeaderErr(err) {
		r.refreshMetadata()
	}
	for _, o := range offs {
		k := Key{p.topic, p.part, o}
		h := r.held[k]
		if h == nil {
			continue
		}
		if h.ackSent {
			if !h.internal && !h.released {
				var aerr error
				if err != nil {
					aerr = fmt.Errorf("member: ack %v %v: %w", AckType(h.ack), k, err)
				}
				r.emitAck(AckResult{Key: k, Type: AckType(h.ack), Err: aerr})
			}
			r.drop(k, h)
			continue
		}
		n := h.renewing
		h.renewing = 0
		h.solo = false
		for range n {
			if err != nil {
				r.emitRenewal(Renewal{Key: k, Err: fmt.Errorf("member: renew %v: %w", k, err)})
			} else {
				if lock <= 0 {
					lock = h.d.Lock // a broker that does not report it
				}
				h.d.Deadline = rq.sent.Add(lock)
				h.d.Lock = lock
				r.emitRenewal(Renewal{Key: k, Deadline: h.d.Deadline})
			}
		}
		if err != nil && isLeaderErr(err) {
			r.loseOne(k, h, err)
		}
	}
}

func (r *runner) handleFetch(rq *request, resp *kmsg.ShareFetchResponse, lock time.Duration) {
	deliveredBefore := len(r.out.Deliveries)
	answered := map[tp]bool{}
	total, failed := 0, 0
	for _, t := range resp.Topics {
		name, ok := r.names[t.TopicID]
		if !ok {
			continue
		}
		for i := range t.Partitions {
			sp := &t.Partitions[i]
			p := tp{name, sp.Partition}
			if _, carried := rq.ops[p]; carried {
				answered[p] = true
				r.opsDone(rq, p, kerr.ErrorForCode(sp.AcknowledgeErrorCode), lock)
			}
			if perr := kerr.ErrorForCode(sp.ErrorCode); perr != nil {
				if isLeaderErr(perr) {
					r.refreshMetadata()
				}
				failed++
				r.logEvery("fetch:"+perr.Error(), slog.LevelWarn, "member: partition fetch failed", "broker", rq.s.broker, "topic", name, "partition", sp.Partition, "err", perr)
				continue
			}
			total += r.acquire(rq, p, sp, lock)
		}
	}
	rq.s.drained = total == 0
	if failed > 0 && total == 0 {
		// A partition error answers at once: without a pause the
		// session would ask again in a tight loop until the metadata
		// says where the partition went.
		rq.s.errs++
		rq.s.backoff = time.Now().Add(backoff(rq.s.errs - 1))
	}
	for p := range rq.ops {
		if !answered[p] {
			r.opsDone(rq, p, nil, lock)
		}
	}
	if total > 0 {
		rtt := time.Since(rq.sent)
		if r.fetchRTT == 0 {
			r.fetchRTT = rtt
		} else {
			r.fetchRTT = (r.fetchRTT*4 + rtt) / 5
		}
	}
	if n := len(r.out.Deliveries) - deliveredBefore; n > 0 {
		r.credit = max(0, r.credit-n)
		r.outAny = true
	}
}

// acquire records the partition's acquired records as held and queues
// their deliveries; it returns the number of offsets acquired.
func (r *runner) acquire(rq *request, p tp, sp *kmsg.ShareFetchResponseTopicPartition, lock time.Duration) int {
	if len(sp.AcquiredRecords) == 0 {
		return 0
	}
	acquired := slices.Clone(sp.AcquiredRecords)
	slices.SortFunc(acquired, func(a, b kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	recs := r.dec.records(p, sp.Records, acquired)
	n := 0
	deadline := rq.sent.Add(lock)
	s := rq.s
	for _, a := range acquired {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			rec := recs[n]
			n++
			k := Key{p.topic, p.part, o}
			h := r.held[k]
			if h != nil && h.broker != s.broker {
				// Held in another session (a leader move): that one is gone.
				r.loseOne(k, h, errors.New("partition moved"))
				h = nil
			}
			if h == nil {
				h = &held{ack: opNone, broker: s.broker}
				r.held[k] = h
			} else if !h.internal {
				r.nHeld--
			}
			h.d = Delivery{Record: rec, Count: int32(a.DeliveryCount), Deadline: deadline, Lock: lock}
			h.internal = false
			r.st.Fetched++
			switch {
			case rec == nil:
				// An offset with no record (a control record or a gap).
				h.internal, h.ack, h.ackSent = true, opGap, false
				s.pending[k] = true
			default:
				// Even past the credit (a broker that gave more than
				// MaxRecords): a release would cost a delivery, and
				// archive a last one, so deliver it; the credit does not
				// go below 0.
				r.nHeld++
				r.out.Deliveries = append(r.out.Deliveries, h.d)
			}
		}
	}
	return n
}

func (r *runner) handleClose(rq *request, resp kmsg.Response, err error) {
	for p := range rq.ops {
		perr := err
		if ar, ok := resp.(*kmsg.ShareAcknowledgeResponse); ok && perr == nil {
			for _, t := range ar.Topics {
				if r.names[t.TopicID] != p.topic {
					continue
				}
				for _, pp := range t.Partitions {
					if pp.Partition == p.part {
						perr = kerr.ErrorForCode(pp.ErrorCode)
					}
				}
			}
		}
		r.opsAnswered(rq, p, perr, 0, true)
	}
	if err != nil {
		r.logEvery("close", slog.LevelWarn, "member: closing share session failed", "broker", rq.s.broker, "err", err)
	}
	// Whatever the close did not answer, the closed session released.
	for k, h := range r.held {
		if h.broker == rq.s.broker {
			r.loseOne(k, h, errors.New("session closed"))
		}
	}
}

// ---- the end ----

// finish ends a graceful leave: the leave heartbeat, the last events.
func (r *runner) finish(ctx context.Context) error {
	r.drainIO()
	r.leaveGroup()
	r.publish()
	if r.outAny {
		select {
		case r.m.events <- r.out:
		case <-ctx.Done():
		}
	}
	return nil
}

func (r *runner) leaveGroup() {
	r.state = Left
	if !r.everJoined && r.epoch == 0 {
		return
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = r.cfg.Group
	req.MemberID = r.cfg.MemberID
	req.MemberEpoch = -1
	ctx, cancel := context.WithTimeout(context.Background(), closeTTL)
	defer cancel()
	resp, err := req.RequestWith(ctx, r.cfg.Client)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		r.log.Warn("member: leave heartbeat failed", "err", err)
	}
	r.epoch = -1
}

// drainIO cancels heartbeats and metadata and waits for every I/O
// goroutine.
func (r *runner) drainIO() {
	r.ioCancel()
	for r.nIO > 0 {
		r.handle(<-r.results)
	}
}

// hardStop: wait for requests in flight (never cancelling a fetch), close
// every session best-effort, leave.
func (r *runner) hardStop() {
	r.stopped, r.leaving, r.closing = true, true, true
	r.ioCancel()
	for !r.sessionsIdle() {
		r.handle(<-r.results)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTTL)
	defer cancel()
	for _, s := range r.sessions {
		if s.epoch > 0 && !s.closed {
			r.sendClose(s, ctx)
		}
	}
	r.drainIO()
	r.leaveGroup()
	r.publish()
}
