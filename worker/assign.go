package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/acl"
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

// ensureAssignmentInterval sets the group's assignment interval as
// [AssignmentInterval] asks and returns the interval the group then has
// (0 when unknown: the broker does not have the config, or it could not
// be read). It fails only for an explicit AssignmentInterval the worker
// is not allowed to set; any other failure is logged once
// (logAssignNotSet).
func (w *Worker) ensureAssignmentInterval(ctx context.Context, admin *kgo.Client, gc groupConfigs) (time.Duration, error) {
	want, explicit := w.cfg.assign.interval, w.cfg.assign.set
	have, known := parseMs(gc.current[groupcfg.AssignmentIntervalMs])
	switch {
	case want == 0 || known && have == want:
		return have, nil
	case gc.described && !known:
		// Kafka before 4.3, and kfake, which assigns at the first
		// heartbeat: nothing to set.
		w.logNoAssignInterval(ctx)
		return 0, nil
	case !explicit && known && (gc.own[groupcfg.AssignmentIntervalMs] || have <= want):
		return have, nil // an operator's choice, or already as short
	}
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{
		groupcfg.AssignmentIntervalMs: strconv.FormatInt(want.Milliseconds(), 10),
	})
	switch {
	case err == nil:
		w.cfg.logger.Debug("set the group's assignment interval", "group", w.cfg.group, "assignment_interval", want)
		return want, nil
	case acl.Denied(err) && explicit:
		return 0, w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group},
			fmt.Errorf("AssignmentInterval(%v): %w", want, err))
	}
	w.logAssignNotSet(ctx, err, have, known)
	return have, nil // 0 when not known
}

// logNoAssignInterval logs that the brokers have no assignment interval:
// at Info level for an explicit AssignmentInterval, else at Debug level
// (Kafka 4.2 and kfake are not worth a word).
func (w *Worker) logNoAssignInterval(ctx context.Context) {
	w.cfg.logger.Log(ctx, levelIf(w.cfg.assign.set, slog.LevelInfo, slog.LevelDebug),
		"the brokers have no share group assignment interval (Apache Kafka 4.3+); AssignmentInterval is ignored",
		"group", w.cfg.group, "asked", w.cfg.assign.interval)
}

// logAssignNotSet logs, once, why setting the group's assignment interval
// failed (err), with the interval the group keeps (have, if known) and
// what to do.
func (w *Worker) logAssignNotSet(ctx context.Context, err error, have time.Duration, known bool) {
	want, explicit := w.cfg.assign.interval, w.cfg.assign.set
	log := w.cfg.logger.With("group", w.cfg.group)
	fix := fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s=%d",
		w.bootstrapHint(), w.cfg.group, groupcfg.AssignmentIntervalMs, want.Milliseconds())
	switch {
	case acl.Denied(err):
		log.Warn("a worker gets its partitions, and a crashed worker's move to the others, only at the group's assignment interval, and the worker may not shorten it",
			"assignment_interval", durationOr(have, known), "fix", "grant ALTER_CONFIGS on the group, or set it with "+fix)
	case unknownGroupConfig(err):
		w.logNoAssignInterval(ctx)
	default:
		// Out of the brokers' bounds, most likely.
		log.Log(ctx, levelIf(explicit, slog.LevelWarn, slog.LevelInfo), "setting the group's assignment interval failed; a worker gets its partitions at the group's interval",
			"asked", want, "assignment_interval", durationOr(have, known), "error", err.Error(),
			"fix", fmt.Sprintf("allow it with the broker configs %s and %s on every broker, then set it with %s",
				groupcfg.BrokerMinAssignmentIntervalMs, groupcfg.BrokerMaxAssignmentIntervalMs, fix))
	}
}

// parseMs reads a config in milliseconds where 0 is a value; ok is false
// when it is absent or not a number.
func parseMs(v string) (d time.Duration, ok bool) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// durationOr is d for a log line, or "unknown".
func durationOr(d time.Duration, known bool) any {
	if !known {
		return "unknown"
	}
	return d
}

// unknownGroupConfig reports whether err is a broker's refusal of a group
// config it does not know.
func unknownGroupConfig(err error) bool {
	return errors.Is(err, kerr.InvalidConfig) && strings.Contains(strings.ToLower(err.Error()), "unknown")
}

// levelIf is hi when cond holds, else lo.
func levelIf(cond bool, hi, lo slog.Level) slog.Level {
	if cond {
		return hi
	}
	return lo
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
