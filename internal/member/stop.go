package member

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

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
//  3. leaving ([Member.Leave]): the member waits until no request of any
//     share session is in flight.
//  4. closing: per share session one ShareAcknowledge with epoch −1
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
func (r *runner) advance(p stopPhase) {
	if p <= r.phase {
		return
	}
	r.log.Debug("member: stop", "from", r.phase, "to", p)
	r.phase = p
}

// signalQuiet closes the Quiet channel, once.
func (r *runner) signalQuiet() {
	select {
	case <-r.m.quiet: // closed already
	default:
		close(r.m.quiet)
	}
}

// closeSessions takes step 4 of the stop: with no request in flight, it
// closes every open share session.
func (r *runner) closeSessions() {
	r.advance(closing)
	for _, s := range r.sessions {
		if s.epoch > 0 && !s.closed {
			r.sendClose(s, r.ioCtx)
		}
	}
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
	r.advance(closing)
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
