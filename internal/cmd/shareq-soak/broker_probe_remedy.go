package main

// Remedies for the broker probe's stall (-probe-remedies): each is
// applied, instead of the freeing restart, to a partition the probe has
// just found STALLED, one remedy per fresh stall, and the probe says
// whether the partition moves again (FREED or STILL STALLED), how long
// after the remedy began the first record was acquired, and how many
// records it had accepted already came again.
//
// What Kafka 4.4.0's broker does, read from its classes
// (kafka.server.share.SharePartitionManager, ShareSessionCache in
// kafka-server): a share partition's state (SharePartition, the in-memory
// cache the stall lives in) leaves the broker's cache only when the
// partition's leadership moves or fails (SharePartitionListener), the
// topic is deleted, its persisted state is fenced, or the group's last
// share session on that broker goes with its connection: the session
// cache counts the group's sessions per broker, and a client connection
// closing (ClientConnectionDisconnectListener.onDisconnect) calls
// ShareGroupListener.onGroupEmpty when the count is 0, which removes every
// share partition of the group from the cache; the next fetch reads the
// persisted state again, as after a restart. A session closed by a final
// ShareFetch or ShareAcknowledge (epoch -1) lowers the count but does not
// check it; leaving the group (ShareGroupHeartbeat epoch -1) reaches the
// group coordinator, not the share partition's cache. The remedies below
// try each of those moves a client has.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/brokerprobe"
	sharemember "github.com/shareq/shareq/internal/member"
)

// probeRemedy is one client move tried on a stalled partition.
type probeRemedy struct {
	name  string
	about string
	away  time.Duration // how long the members stay away (leave, reconnect)
	apply func(ctx context.Context, pr *prober, r *probeRemedy) error
}

// probeRemedyNames lists the remedies -probe-remedies takes; a leave or
// reconnect remedy takes its time away as a suffix (leave-5s).
func probeRemedyNames() []string {
	return []string{"leave-<d>", "leave-keep-conn-<d>", "close-session", "reconnect-<d>", "poke", "close-session-poke", "alter-start", "alter-next", "delete-offsets"}
}

// parseRemedy makes the remedy named name.
func parseRemedy(name string) (*probeRemedy, error) {
	away := func(prefix string) (time.Duration, bool) {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return 0, false
		}
		d, err := time.ParseDuration(rest)
		return d, err == nil && d >= 0
	}
	if d, ok := away("leave-keep-conn-"); ok {
		return &probeRemedy{name: name, away: d, apply: remedyLeaveKeepConn,
			about: fmt.Sprintf("the member leaves the group (heartbeat epoch -1) but keeps its share session and connection, stays away %v, joins again", d)}, nil
	}
	if d, ok := away("leave-"); ok {
		return &probeRemedy{name: name, away: d, apply: remedyLeave,
			about: fmt.Sprintf("the member leaves the group (heartbeat epoch -1) and closes its connections, stays away %v, a new member joins", d)}, nil
	}
	if d, ok := away("reconnect-"); ok {
		return &probeRemedy{name: name, away: d, apply: remedyReconnect,
			about: fmt.Sprintf("the member stays in the group (heartbeats go on) but closes its share session's connection, opens a new one after %v", d)}, nil
	}
	switch name {
	case "poke":
		return &probeRemedy{name: name, apply: remedyPoke,
			about: "the member stays, its share session open; a second connection opens an empty share session as the same member (ShareFetch epoch 0: the broker replaces the member's session with it) and closes"}, nil
	case "close-session-poke":
		return &probeRemedy{name: name, apply: remedyPoke,
			about: "the member stays and keeps its connection; its share session is closed (ShareAcknowledge epoch -1), a second connection opens an empty share session as the same member and closes, the member's next fetch opens its session again"}, nil
	case "close-session":
		return &probeRemedy{name: name, apply: remedyCloseSession,
			about: "the member stays; its share session is closed (ShareAcknowledge epoch -1) and opened again on the same connection"}, nil
	case "alter-start", "alter-next":
		return &probeRemedy{name: name, apply: remedyAlter,
			about: "the member leaves the group (its connection kept), the group's start offset is set (AlterShareGroupOffsets) to " +
				map[string]string{"alter-start": "the current start offset", "alter-next": "the first offset never acquired"}[name] + ", the member joins again"}, nil
	case "delete-offsets":
		return &probeRemedy{name: name, apply: remedyAlter,
			about: "the member leaves the group (its connection kept), the group's offsets of the topic are deleted (DeleteShareGroupOffsets), the member joins again"}, nil
	}
	return nil, fmt.Errorf("no remedy %q (have %s)", name, strings.Join(probeRemedyNames(), ","))
}

// tryRemedy applies the prober's remedy to its stalled partition and
// watches whether the partition moves again.
func (pr *prober) tryRemedy(ctx context.Context) error {
	r := pr.remedy
	pr.logf("stalled; remedy %s: %s", r.name, r.about)
	pr.remedyAt = time.Now()
	before := pr.Redelivered
	if err := r.apply(ctx, pr, r); err != nil {
		return fmt.Errorf("remedy %s: %w", r.name, err)
	}
	was := pr.MaxAcquired
	after, err := pr.watch(ctx, pr.f.stallAfter+15*time.Second)
	if err != nil {
		return err
	}
	verdict := map[string]string{"OK": "FREED", "STALLED": "STILL STALLED"}[after]
	if verdict == "" {
		verdict = after
	}
	first := "none"
	if pr.firstAfter > 0 {
		first = fmt.Sprintf("%.2fs", pr.firstAfter.Seconds())
	}
	pr.remedyResult = fmt.Sprintf("%-20s %-18s %-14s first acquisition %-7s after the remedy began, %d accepted records redelivered; highest acquired %d (%d at the stall)",
		pr.v.Name, r.name, verdict, first, pr.Redelivered-before, pr.MaxAcquired, was)
	pr.logf("remedy %s: %s", r.name, pr.remedyResult)
	return nil
}

// remedyLeave: the member leaves and disconnects; after r.away a new
// member joins.
func remedyLeave(ctx context.Context, pr *prober, r *probeRemedy) error {
	pr.M.Close()
	pr.logf("member left the group, its connections closed; away %v", r.away)
	sleepCtx(ctx, r.away)
	pr.M = brokerprobe.NewMember(pr.seeds, pr.group, pr.topic, pr.topicID)
	return pr.M.Join(ctx)
}

// remedyLeaveKeepConn: the member leaves the group but its share session
// and connection stay; after r.away it joins again.
func remedyLeaveKeepConn(ctx context.Context, pr *prober, r *probeRemedy) error {
	pr.M.Leave()
	pr.logf("member left the group (session and connection kept); away %v", r.away)
	sleepCtx(ctx, r.away)
	return pr.M.Rejoin(ctx)
}

// remedyReconnect: the member stays in the group; its share session's
// connection is closed, and after r.away a new one fetches.
func remedyReconnect(ctx context.Context, pr *prober, r *probeRemedy) error {
	pr.M.Reconnect()
	pr.logf("share session's connection closed (member still in the group); new connection after %v", r.away)
	sleepCtx(ctx, r.away)
	return nil
}

// remedyCloseSession: the member's share session is closed with a final
// ShareAcknowledge and opened again on the same connection by the next
// fetch.
func remedyCloseSession(ctx context.Context, pr *prober, _ *probeRemedy) error {
	if err := pr.M.CloseSession(ctx); err != nil {
		return fmt.Errorf("close the share session: %w", err)
	}
	pr.logf("share session closed (final ShareAcknowledge), connection kept")
	return nil
}

// remedyPoke: (close-session-poke: after the member's session is
// closed) a second client opens an empty share session as the same
// member on a connection of its own (ShareFetch epoch 0 naming no
// partition: nothing acquired; the broker drops a session of the same
// member and group it has, so the member's own session, if open, goes)
// and closes that connection: the broker's disconnect path checks
// whether the group has a share session left on it. The member's next
// fetch in its old session is refused and it opens a new one.
func remedyPoke(ctx context.Context, pr *prober, r *probeRemedy) error {
	if r.name == "close-session-poke" {
		if err := pr.M.CloseSession(ctx); err != nil {
			return fmt.Errorf("close the share session: %w", err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(pr.seeds...), kgo.RetryTimeout(5*time.Second))
	if err != nil {
		return err
	}
	err = sharemember.ReplaceSession(ctx, cl, 1, pr.group, pr.M.ID())
	cl.Close()
	if err != nil {
		return fmt.Errorf("the empty share session: %w", err)
	}
	// The broker handles the disconnect on its own thread: give it a
	// moment before the member's next fetch opens a session again.
	sleepCtx(ctx, time.Second)
	pr.logf("an empty share session opened as the member on a second connection, that connection closed 1s ago")
	return nil
}

// remedyAlter: with the group empty (the member left, its connection
// kept so that the broker's group-empty path is not what frees it), the
// group's start offset is set or its offsets deleted, then the member
// joins again.
func remedyAlter(ctx context.Context, pr *prober, r *probeRemedy) error {
	s := pr.state(ctx)
	pr.M.Leave()
	to := s.start
	if r.name == "alter-next" {
		to = pr.MaxAcquired + 1
	}
	var err error
	for i := range 20 {
		if r.name == "delete-offsets" {
			var resp kadm.DeleteShareGroupOffsetsResponses
			resp, err = pr.adm.DeleteShareGroupOffsets(ctx, pr.group, pr.topic)
			if err == nil {
				err = resp.Error()
			}
		} else {
			var resp kadm.AlterShareGroupOffsetsResponses
			o := kadm.Offsets{}
			o.AddOffset(pr.topic, 0, to, -1)
			resp, err = pr.adm.AlterShareGroupOffsets(ctx, pr.group, o)
			if err == nil {
				err = resp.Error()
			}
		}
		if err == nil || !(errors.Is(err, kerr.NonEmptyGroup) || errors.Is(err, kerr.CoordinatorLoadInProgress)) {
			break
		}
		pr.logf("%s: %v (try %d); again in 500ms", r.name, err, i+1)
		sleepCtx(ctx, 500*time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.name, err)
	}
	if r.name == "delete-offsets" {
		pr.logf("member left (connection kept); the group's offsets of the topic deleted (start offset was %d)", s.start)
	} else {
		pr.logf("member left (connection kept); start offset set to %d (was %d, highest acquired %d)", to, s.start, pr.MaxAcquired)
	}
	pr.report(ctx, "after "+r.name)
	return pr.M.Rejoin(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
