package member

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// closeTTL bounds the hard stop's closes and the leave heartbeat.
const closeTTL = 3 * time.Second

// stopPhase is the member's place in its stop sequence. It only moves
// forward, and the graceful stop takes its steps in this order:
//
//  1. running: the member heartbeats, fetches as its credit allows, and
//     sends acknowledgements and renewals.
//  2. draining ([Member.StopFetching]): no ShareFetch that can acquire
//     records is sent any more; the fetches in flight return (a fetch is
//     never cancelled) and their records go out on Events. Then Quiet
//     closes (signalQuiet). Heartbeats, acknowledgements and renewals go
//     on while the executor's jobs finish.
//  3. leaving ([Member.Leave]): acknowledgements and renewals still go
//     out (none held back), and the member waits for a step at which no
//     request of any share session is in flight and every session that
//     holds records is open (a session reset to epoch 0 is opened again
//     first, turn's rule 2).
//  4. closing: per open share session one ShareAcknowledge with epoch −1
//     carrying the pending acknowledgements plus RELEASE for every held
//     record not acknowledged (sendClose); no heartbeat or metadata
//     request is sent any more, and acknowledgements and renewals queued
//     from now on answer [ErrNotHeld].
//  5. once every close has returned: the leave heartbeat, the last
//     events, and Run returns nil (finish).
//
// Leave implies StopFetching: a Leave that comes while running or
// draining moves straight to leaving, and Quiet may then close in any
// later phase, or never if Run returns first. A hard stop (Run's ctx done,
// or a fatal heartbeat error) jumps to closing at once (hardStop).
type stopPhase int8

const (
	running stopPhase = iota
	draining
	leaving
	closing
)

func (p stopPhase) String() string {
	return [...]string{"running", "draining", "leaving", "closing"}[p]
}

// advance moves the stop sequence forward to p; it never moves back.
func (m *Member) advance(p stopPhase) {
	if p <= m.phase {
		return
	}
	m.log.Debug("member: stop", "from", m.phase, "to", p)
	m.phase = p
}

// signalQuiet closes the Quiet channel, once.
func (m *Member) signalQuiet() {
	select {
	case <-m.quiet: // closed already
	default:
		close(m.quiet)
	}
}

// closeSessions takes step 4 of the stop: with no request in flight, it
// closes every open share session.
func (m *Member) closeSessions() {
	m.advance(closing)
	for _, s := range m.sessions {
		if s.epoch > 0 && !s.closed {
			m.sendClose(s, m.ioCtx)
		}
	}
}

// sendClose closes the session (epoch −1) with its pending acks plus
// RELEASE for every held record not acknowledged.
func (m *Member) sendClose(s *session, ctx context.Context) {
	rq := &request{s: s, kind: kindClose, epoch: -1, ops: map[tp][]int64{}}
	for k, h := range m.held.All() {
		if h.broker != s.broker {
			continue
		}
		if h.ack == opNone {
			m.count(h, -1)
			h.ack = int8(Release)
			m.count(h, 1)
			h.released = true
			for range h.renews {
				m.emitRenewal(Renewal{Key: k, Err: ErrNotHeld})
			}
			h.renews = 0
		}
		if h.ackSent {
			continue // answered by the request in flight
		}
		h.ackSent = true
		s.unqueue(k, h)
		p := tp{k.Topic, k.Partition}
		rq.ops[p] = append(rq.ops[p], k.Offset)
	}
	for _, offs := range rq.ops {
		slices.Sort(offs)
	}
	rq.req = m.buildAck(s, -1, false, rq.ops)
	s.closed = true
	m.launch(rq, ctx)
}

func (m *Member) handleClose(rq *request, resp kmsg.Response, err error) {
	// The partitions' answers, read once: a close carries every held
	// partition of the session.
	codes := map[tp]int16{}
	if ar, ok := resp.(*kmsg.ShareAcknowledgeResponse); ok && err == nil {
		for _, t := range ar.Topics {
			name := m.meta.names[t.TopicID]
			for _, pp := range t.Partitions {
				codes[tp{name, pp.Partition}] = pp.ErrorCode
			}
		}
	}
	for p := range rq.ops {
		perr := err
		if perr == nil {
			perr = kerr.ErrorForCode(codes[p])
		}
		m.opsAnswered(rq, p, perr, 0, true)
	}
	if err != nil {
		m.logEvery("close", slog.LevelWarn, "member: closing share session failed", "broker", rq.s.broker, "err", err)
	}
	// Whatever the close did not answer, the closed session released.
	for k, h := range m.held.All() {
		if h.broker == rq.s.broker {
			m.loseOne(k, h, errors.New("session closed"))
		}
	}
}

// ---- the end ----

// finish ends a graceful leave: the leave heartbeat, the last events.
func (m *Member) finish(ctx context.Context) error {
	m.drainIO()
	m.leaveGroup()
	m.publish()
	if !m.out.empty() {
		select {
		case m.events <- m.out:
		case <-ctx.Done():
		}
	}
	return nil
}

func (m *Member) leaveGroup() {
	m.group.state = Left
	if !m.group.everJoined && m.group.epoch == 0 {
		return
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.cfg.Group
	req.MemberID = m.cfg.MemberID
	req.MemberEpoch = -1
	ctx, cancel := context.WithTimeout(context.Background(), closeTTL)
	defer cancel()
	resp, err := req.RequestWith(ctx, m.cfg.Client)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		m.log.Warn("member: leave heartbeat failed", "err", err)
	}
	m.group.epoch = -1
}

// drainIO cancels heartbeats and metadata and waits for every I/O
// goroutine.
func (m *Member) drainIO() {
	m.ioCancel()
	for m.nIO > 0 {
		m.handle(<-m.results)
	}
}

// hardStop: wait for requests in flight (never cancelling a fetch), close
// every open session best-effort, count the records of a session reset
// and not reopened as lost (no close can release them), leave.
func (m *Member) hardStop() {
	m.advance(closing)
	m.ioCancel()
	for !m.sessionsIdle() {
		m.handle(<-m.results)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTTL)
	defer cancel()
	for _, s := range m.sessions {
		switch {
		case s.epoch > 0 && !s.closed:
			m.sendClose(s, ctx)
		case s.epoch == 0 && s.held.len() > 0:
			// Reset and not reopened: no close can release its
			// records; the connection's end or their locks will.
			for k, h := range m.held.All() {
				if h.broker == s.broker {
					m.loseOne(k, h, errors.New("share session not open at the stop"))
				}
			}
		}
	}
	m.drainIO()
	m.leaveGroup()
	m.publish()
}
