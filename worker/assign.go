package worker

import (
	"time"

	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/member"
)

// AssignmentIntervalDefault is the share.assignment.interval.ms the
// worker asks for its group: a worker that joins gets its partitions
// about this long after its first heartbeat, where Kafka's default
// (1 s) made a worker's first job wait over a second.
const AssignmentIntervalDefault = 100 * time.Millisecond

// assignIntervalMax is the longest AssignmentInterval: Kafka's bound
// (group.share.max.assignment.interval.ms is 15 s by default).
const assignIntervalMax = 15 * time.Second

// assignConfig is what AssignmentInterval sets.
type assignConfig struct {
	interval time.Duration
	set      bool // AssignmentInterval was given
}

// AssignmentInterval sets the group's share.assignment.interval.ms
// (Kafka 4.3+, KIP-1263): how often at most the group coordinator
// computes the group's assignment. A worker that joins, or the workers
// left when one leaves or is fenced, get the partitions that move only at
// the next computation, so the interval adds to a worker's start (from
// worker.New to its first job) and to the failover after a crash. With
// Kafka's default of 1 s a worker's first job came about 1.1 s after New;
// at 100 ms, about 0.2 s (BENCHMARKS.md section 9). A shorter interval
// costs the coordinator more assignments while members join and leave,
// at most one per interval.
//
// Default [AssignmentIntervalDefault], set only when it is shorter than
// the group's and the group has none of its own (an operator's choice
// wins); a worker that may not alter the group's configs then logs that
// at Warn and starts. Given explicitly, d is set whatever the group had,
// and a missing ALTER_CONFIGS right fails Run with [ErrNotAuthorized].
// Brokers that do not know the config (Apache Kafka before 4.3) are left
// alone, with an Info line when d was given. AssignmentInterval(0)
// leaves the group's interval alone. d must be whole milliseconds, at
// most 15 s (Kafka's bound, group.share.max.assignment.interval.ms).
func AssignmentInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.assign.interval, c.assign.set = d, true })
}

func (c *config) checkAssign(bad func(format string, args ...any)) {
	if !c.assign.set {
		c.assign.interval = AssignmentIntervalDefault
	}
	switch d := c.assign.interval; {
	case d < 0 || d > assignIntervalMax:
		bad("AssignmentInterval(%v): must be from 1ms to %v (0 leaves the group's assignment interval alone)", d, assignIntervalMax)
	case d%time.Millisecond != 0:
		bad("AssignmentInterval(%v): must be whole milliseconds (Kafka's %s)", d, groupcfg.AssignmentIntervalMs)
	}
}

// assignmentPoll is how often the member heartbeats while it waits for
// its first partitions, given the group's assignment interval (0 when
// unknown: the member's default): about twice per interval, so that the
// partitions come within half an interval of their assignment, and never
// more often than every minAssignmentPoll.
func assignmentPoll(interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	return min(max(interval/2, minAssignmentPoll), member.AssignmentPollDefault)
}

// minAssignmentPoll bounds the heartbeats of a member waiting for its
// first partitions: one every 50 ms at most, for a group whose interval
// is shorter (or 0).
const minAssignmentPoll = 50 * time.Millisecond
