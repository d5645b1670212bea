package member

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// tp names a partition.
type tp struct {
	topic string
	part  int32
}

// run is Run's loop. Each turn it sends what is due (step), publishes the
// stats, and ends once the sessions' closes have returned; then it waits
// for one of: ctx done (the hard stop), the mailbox, a request's result,
// the executor taking the events gathered in out, or the next timer
// (nextWake).
func (m *Member) run(ctx context.Context) error {
	m.ioCtx, m.ioCancel = context.WithCancel(context.Background())
	defer m.ioCancel()
	m.meta.due = time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		m.step()
		m.publish()
		if m.phase == closing && m.sessionsIdle() {
			return m.finish(ctx)
		}
		var out chan<- Event
		if !m.out.empty() {
			out = m.events
		}
		timer.Reset(m.nextWake())
		select {
		case <-ctx.Done():
			m.hardStop()
			return ctx.Err()
		case <-m.wake:
			m.mailbox()
		case res := <-m.results:
			m.handle(res)
			if m.fatal != nil {
				m.hardStop()
				return m.fatal
			}
		case out <- m.out:
			m.sent()
		case <-timer.C:
		}
	}
}

// ---- the mailbox ----

func (m *Member) mailbox() {
	b := m.take()
	if !b.anything {
		return
	}
	m.credit += b.grant
	m.advance(b.phase)
	if b.paused != nil {
		m.pauseTopics(*b.paused)
	}
	for _, q := range b.idle {
		m.answerIdle(q)
	}
	for _, k := range b.renews {
		h := m.held.Get(k)
		if h == nil || h.internal || h.ack != opNone || m.phase >= closing {
			m.emitRenewal(Renewal{Key: k, Err: ErrNotHeld})
			continue
		}
		h.renews++
		m.sessions[h.broker].queue(k, h)
	}
	for _, a := range b.acks {
		h := m.held.Get(a.k)
		if h == nil || h.internal || h.ack != opNone || m.phase >= closing || a.t < Accept || a.t > Reject {
			err := ErrNotHeld
			if h != nil && (a.t < Accept || a.t > Reject) {
				err = fmt.Errorf("member: ack %v of %v: unknown type", a.t, a.k)
			}
			m.emitAck(AckResult{Key: a.k, Type: a.t, Err: err})
			continue
		}
		m.count(h, -1)
		h.ack = int8(a.t)
		h.d.Record = nil // the job ended: its bytes are free (bytes.go)
		m.count(h, 1)
		if h.renews > 0 {
			// The job ended: renewals not yet sent are moot.
			for range h.renews {
				m.emitRenewal(Renewal{Key: a.k, Err: ErrNotHeld})
			}
			h.renews = 0
		}
		m.sessions[h.broker].queue(a.k, h)
	}
}

// take takes the mailbox's work, leaving it the slices of the work taken
// before, emptied: Run is done with them.
func (m *Member) take() mailbox {
	clear(m.spare.acks)
	clear(m.spare.renews)
	m.mu.Lock()
	b := m.mbox
	m.mbox = mailbox{acks: m.spare.acks[:0], renews: m.spare.renews[:0]}
	m.mu.Unlock()
	m.spare.acks, m.spare.renews = b.acks, b.renews
	return b
}

// publish copies the state into the snapshot Stats reads. It runs after
// every step, so it copies a struct and an array and builds no map
// (Stats does, for its caller).
func (m *Member) publish() {
	m.st.State = m.group.state
	m.st.Epoch = m.group.epoch
	n := 0
	for _, ps := range m.group.assigned {
		n += len(ps)
	}
	m.st.Partitions = n
	m.st.Held = m.nHeld
	m.st.HeldBytes = m.bytes
	m.st.Credit = m.credit
	m.st.FetchRTT = m.fetchRTT
	m.st.WholeBatches = m.wholeBatches()
	m.st.Fetchers = m.fetchers
	m.st.BatchesDecoded, m.st.DecodedKept, m.st.DecodedKeptBytes = m.dec.decodes, m.dec.kept, int64(m.dec.bytes)
	m.statsMu.Lock()
	m.stats, m.statsAcks = m.st, m.acks
	m.statsMu.Unlock()
}

// logEvery logs msg at level at most once a minute per kind.
func (m *Member) logEvery(kind string, level slog.Level, msg string, args ...any) {
	now := time.Now()
	if t, ok := m.logged[kind]; ok && now.Sub(t) < time.Minute {
		m.log.Debug(msg, args...)
		return
	}
	m.logged[kind] = now
	m.log.Log(context.Background(), level, msg, args...)
}

// ---- scheduling ----

func (m *Member) nextWake() time.Duration {
	now := time.Now()
	next := now.Add(time.Minute)
	if !m.group.busy && m.phase < closing && m.group.due.Before(next) {
		next = m.group.due
	}
	if !m.meta.busy && !m.meta.due.IsZero() && m.meta.due.Before(next) {
		next = m.meta.due
	}
	if due := m.prio.probeDue(now); !due.IsZero() && due.Before(next) {
		next = due
	}
	for _, s := range m.sessions {
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

// step sends what is due, in this order:
//
//  1. the heartbeat, when due and none is in flight, until the sessions
//     close;
//  2. Metadata, when wanted and due and none is in flight, likewise;
//  3. the sessions' closes, when leaving, no request of a session is in
//     flight and none holds records unopened (step 4 of the stop, see
//     [stopPhase]; turn opens such a session first);
//  4. until then, each idle session's next request (turn); while the
//     member may fetch, a session is made first for each broker that
//     leads a wanted partition;
//  5. Quiet, once draining with no fetch in flight and every delivery
//     taken from out (the end of step 2 of the stop).
func (m *Member) step() {
	now := time.Now()
	if m.phase < closing && !m.group.busy && !now.Before(m.group.due) { // 1
		m.sendHeartbeat()
	}
	if m.phase < closing && !m.meta.busy && !m.meta.due.IsZero() && !now.Before(m.meta.due) { // 2
		m.sendMetadata()
	}
	if m.phase == leaving && m.sessionsIdle() && !m.anyToReopen() { // 3
		m.closeSessions()
	}
	if m.phase < closing { // 4
		if m.prio != nil {
			m.probeUrgent(now)
		}
		fetchers := 0
		if m.canFetch() {
			for b, ps := range m.meta.want {
				if len(ps) > 0 {
					fetchers++
					m.session(b)
				}
			}
		}
		m.fetchers = fetchers
		for _, s := range m.sessions {
			if !s.busy && !now.Before(s.backoff) {
				m.turn(s, fetchers)
			}
		}
	}
	if m.phase >= draining && !m.fetching() && len(m.out.Deliveries) == 0 { // 5
		m.signalQuiet()
	}
}

func (m *Member) canFetch() bool {
	return m.group.state == Joined && m.phase == running
}

func (m *Member) fetching() bool { return m.reserved > 0 || m.anyFetchBusy() }

func (m *Member) anyFetchBusy() bool {
	for _, s := range m.sessions {
		if s.busy && s.epoch == 0 && !s.closed {
			// An opening request may acquire records.
			return true
		}
	}
	return false
}

func (m *Member) sessionsIdle() bool {
	for _, s := range m.sessions {
		if s.busy {
			return false
		}
	}
	return true
}

// anyToReopen reports whether a session not open holds records: reset to
// epoch 0, it must be opened before the stop can close it.
func (m *Member) anyToReopen() bool {
	for _, s := range m.sessions {
		if s.epoch == 0 && !s.closed && s.held.len() > 0 {
			return true
		}
	}
	return false
}

func (m *Member) session(b int32) *session {
	s := m.sessions[b]
	if s == nil {
		s = &session{broker: b, parts: map[tp]bool{}}
		m.sessions[b] = s
	}
	return s
}
