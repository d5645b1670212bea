package member

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// Idle partitions: the member's side of the worker's stall check
// (worker/stall.go). A partition is idle when it is assigned to the
// member and no fetch has acquired a record of it for a long time while
// its session fetched with credit to spare and came back empty-handed,
// again and again. That alone is an idle topic (or records held by jobs,
// this member's or another's); the worker's stall check tells those
// from a partition the broker has stopped serving by the group's offsets
// (RELIABILITY.md, "A partition the broker stops serving").

// IdlePartition is a partition [Member.Idle] reports.
type IdlePartition struct {
	Topic     string
	Partition int32
	// For is how long no fetch has acquired a record of it: since the
	// last one did, or since the member was given the partition.
	For time.Duration
	// EmptyFetches counts its session's fetches in that time that asked
	// for records and acquired none of any partition.
	EmptyFetches int64
	// Held is the number of its records the member holds (jobs running,
	// waiting for a handler, or their acks not yet answered).
	Held int
}

// idleMark is, for one assigned partition, where its idle time runs
// from. Owned by Run's goroutine.
type idleMark struct {
	since  time.Time // the last acquisition of its records, or when it was assigned (or moved to broker)
	broker int32     // the session that fetches it
	empty  int64     // that session's empty count (session.empty) at since
}

// idleQuery is an [Member.Idle] call waiting in the mailbox.
type idleQuery struct {
	after    time.Duration
	minEmpty int64
	reply    chan []IdlePartition // buffer 1: Run never waits on it
}

// Idle returns the partitions assigned to the member that no fetch has
// acquired a record of for at least after, and whose session came back
// from at least minEmpty fetches with nothing in that time (so the member was asking, with credit, and the
// broker had nothing to give). It asks Run's goroutine and waits for the
// answer or ctx. Safe for concurrent use.
func (m *Member) Idle(ctx context.Context, after time.Duration, minEmpty int64) ([]IdlePartition, error) {
	q := idleQuery{after: after, minEmpty: minEmpty, reply: make(chan []IdlePartition, 1)}
	m.post(func(b *mailbox) { b.idle = append(b.idle, q) })
	select {
	case ps := <-q.reply:
		return ps, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// markIdle brings the marks in line with the plan (replan): a partition
// newly wanted, or moved to another broker, starts its idle time now.
func (m *Member) markIdle() {
	now := time.Now()
	for p, b := range m.meta.wantSet {
		broker := b - 1
		if mk := m.idleMarks[p]; mk != nil && mk.broker == broker {
			continue
		}
		mk := &idleMark{since: now, broker: broker}
		if s := m.sessions[broker]; s != nil {
			mk.empty = s.empty
		}
		m.idleMarks[p] = mk
	}
	for p := range m.idleMarks {
		if m.meta.wantSet[p] == 0 {
			delete(m.idleMarks, p)
		}
	}
}

// acquiredNow restarts the idle time of a partition a fetch of session s
// acquired records of.
func (m *Member) acquiredNow(s *session, p tp, now time.Time) {
	if mk := m.idleMarks[p]; mk != nil {
		mk.since, mk.broker, mk.empty = now, s.broker, s.empty
	}
}

// answerIdle answers an Idle call.
func (m *Member) answerIdle(q idleQuery) {
	now := time.Now()
	var out []IdlePartition
	for p, mk := range m.idleMarks {
		s := m.sessions[mk.broker]
		if s == nil || now.Sub(mk.since) < q.after || s.empty-mk.empty < q.minEmpty {
			continue
		}
		out = append(out, IdlePartition{Topic: p.topic, Partition: p.part, For: now.Sub(mk.since), EmptyFetches: s.empty - mk.empty, Held: m.heldOf(p)})
	}
	slices.SortFunc(out, func(a, b IdlePartition) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	q.reply <- out
}

// heldOf counts the records of p the sessions hold.
func (m *Member) heldOf(p tp) int {
	n := 0
	for _, s := range m.sessions {
		n += s.held.get(p)
	}
	return n
}
