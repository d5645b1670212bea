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

// peerBroker names the broker of a share session, peerCoordinator the
// group coordinator, for noteReach.
func peerBroker(id int32) string { return fmt.Sprintf("broker %d", id) }

const peerCoordinator = "group coordinator"

// noteReach records the outcome of a request to peer: err is nil or a
// Kafka error code when the peer answered.
func (m *Member) noteReach(peer string, err error) {
	if err != nil && !isKerr(err) {
		if errors.Is(err, context.Canceled) || m.phase >= closing {
			return // the member is stopping: no word from the peer
		}
		if _, down := m.unreach[peer]; down {
			return
		}
		if m.unreach == nil {
			m.unreach = map[string]time.Time{}
		}
		m.unreach[peer] = time.Now()
		what := "its share session is lost with the records it held, which the broker delivers again once their locks expire"
		if peer == peerCoordinator {
			what = "a member without heartbeats for the session timeout is fenced, and rejoins when the coordinator answers"
		}
		m.log.Warn("member: no answer from "+peer+"; retrying: "+what, "peer", peer, "err", err)
		return
	}
	if since, down := m.unreach[peer]; down {
		delete(m.unreach, peer)
		m.log.Info("member: "+peer+" answering again", "peer", peer, "unanswered_for", time.Since(since).Round(time.Millisecond))
	}
}
