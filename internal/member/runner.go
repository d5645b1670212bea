package member

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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
	phase    stopPhase

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
		if r.phase == closing && r.sessionsIdle() {
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
	r.advance(b.phase)
	for _, k := range b.renews {
		h := r.held[k]
		if h == nil || h.internal || h.ack != opNone || r.phase >= closing {
			r.emitRenewal(Renewal{Key: k, Err: ErrNotHeld})
			continue
		}
		h.renews++
		r.sessions[h.broker].pending[k] = true
	}
	for _, a := range b.acks {
		h := r.held[a.k]
		if h == nil || h.internal || h.ack != opNone || r.phase >= closing || a.t < Accept || a.t > Reject {
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
	if !r.hbBusy && r.phase < closing && r.hbDue.Before(next) {
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
	if r.phase < closing && !r.hbBusy && !now.Before(r.hbDue) {
		r.sendHeartbeat()
	}
	if !r.metaBusy && !r.metaDue.IsZero() && !now.Before(r.metaDue) && r.phase < closing {
		r.sendMetadata()
	}
	if r.phase == leaving && r.sessionsIdle() {
		r.closeSessions()
	}
	if r.phase < closing {
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
	if r.phase >= draining && !r.fetching() && len(r.out.Deliveries) == 0 {
		r.signalQuiet() // the end of step 2 of the stop
	}
}

func (r *runner) canFetch() bool {
	return r.state == Joined && r.phase == running
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
