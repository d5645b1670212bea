package member

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A broker that stops answering (it died without its host resetting the
// connection, or the network went silent: packets dropped, nothing
// closed) is noticed by the client's read deadlines, not by the
// operating system's TCP timeout of minutes: franz-go gives every
// request kgo.RequestTimeoutOverhead (10 s by default) on top of its own
// wait (a ShareFetch's MaxWait), and the member bounds its heartbeats
// and share requests with contexts of its own besides (membership.go,
// requests.go). A request that times out kills its connection; the
// member then treats it as any failed request: a share session's
// records are lost (Event.Lost), the coordinator is retried with
// backoff, and a member the coordinator fenced meanwhile rejoins.
//
// noteReach says so once per outage and peer, at Warn, and once when the
// peer answers again, at Info, with how long it had not: the per-request
// lines are rate limited and say nothing of the recovery.
//
// A group coordinator that moved (its broker restarted or lost the
// leadership of the group's partition) is answered for by the broker
// asked: NOT_COORDINATOR, or COORDINATOR_NOT_AVAILABLE or
// COORDINATOR_LOAD_IN_PROGRESS while the new one loads the group. Such an
// answer is no answer from the coordinator: it starts an outage as
// silence does, but a move ends within a few heartbeats (the member looks
// the coordinator up again: findCoordinator), so its Warn line waits
// until no coordinator has answered for coordinatorGrace; a move that
// ends sooner is logged at Debug only (logEvery in handleHeartbeat).

// peerBroker names the broker of a share session, peerCoordinator the
// group coordinator, for noteReach.
func peerBroker(id int32) string { return fmt.Sprintf("broker %d", id) }

const peerCoordinator = "group coordinator"

// coordinatorGrace is how long the member is answered that the broker it
// asks is not (or not yet) the group's coordinator before it says so at
// Warn: Kafka moves a group's coordinator in about a second (a restarted
// broker's partitions led elsewhere, the group's state loaded there).
const coordinatorGrace = 5 * time.Second

// outage is a peer not answering, for noteReach.
type outage struct {
	since time.Time // the first request not answered
	told  bool      // the Warn line was logged
}

// noteReach records the outcome of a request to peer: err is nil or a
// Kafka error code when the peer answered.
func (m *Member) noteReach(peer string, err error) {
	silent := err != nil && !isKerr(err)
	astray := err != nil && peer == peerCoordinator && staleCoordinator(err)
	if !silent && !astray {
		if o, down := m.unreach[peer]; down {
			delete(m.unreach, peer)
			if o.told {
				m.log.Info("member: "+peer+" answering again", "peer", peer, "unanswered_for", time.Since(o.since).Round(time.Millisecond))
			}
		}
		return
	}
	if silent && (errors.Is(err, context.Canceled) || m.phase >= closing) {
		return // the member is stopping: no word from the peer
	}
	now := time.Now()
	o, down := m.unreach[peer]
	if !down {
		o = outage{since: now}
	}
	if !o.told && (silent || now.Sub(o.since) >= coordinatorGrace) {
		o.told = true
		what := "its share session is lost with the records it held, which the broker delivers again once their locks expire"
		if peer == peerCoordinator {
			what = "a member without heartbeats for the session timeout is fenced, and rejoins when the coordinator answers"
		}
		if silent {
			m.log.Warn("member: no answer from "+peer+"; retrying: "+what, "peer", peer, "err", err)
		} else {
			m.log.Warn("member: no group coordinator found for "+now.Sub(o.since).Round(time.Second).String()+
				" (the broker asked says it is not the coordinator); looking it up again: "+what, "peer", peer, "err", err)
		}
	}
	if m.unreach == nil {
		m.unreach = map[string]outage{}
	}
	m.unreach[peer] = o
}
