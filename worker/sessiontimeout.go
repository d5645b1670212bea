package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/groupcfg"
)

// heartbeatFor is the heartbeat interval the worker asks for with session
// timeout d: a sixth of it, so a member misses five heartbeats before it
// is fenced (Kafka's defaults, 45 s and 5 s, leave eight).
func heartbeatFor(d time.Duration) time.Duration { return (d / 6).Truncate(time.Millisecond) }

// sessionBounds are the broker's bounds of the group's session timeout and
// heartbeat interval; 0 where the broker does not report one (kfake).
type sessionBounds struct {
	minSession, maxSession, minHeartbeat, maxHeartbeat time.Duration
	session, heartbeat                                 time.Duration // the broker-wide defaults
}

func readSessionBounds(ctx context.Context, admin *kgo.Client) sessionBounds {
	m, err := groupcfg.Broker(ctx, admin, groupcfg.BrokerMinSessionTimeoutMs, groupcfg.BrokerMaxSessionTimeoutMs,
		groupcfg.BrokerMinHeartbeatIntervalMs, groupcfg.BrokerMaxHeartbeatIntervalMs,
		groupcfg.BrokerSessionTimeoutMs, groupcfg.BrokerHeartbeatIntervalMs)
	if err != nil {
		return sessionBounds{} // no DESCRIBE_CONFIGS on the cluster: the set says
	}
	return sessionBounds{
		minSession: configMs(m, groupcfg.BrokerMinSessionTimeoutMs), maxSession: configMs(m, groupcfg.BrokerMaxSessionTimeoutMs),
		minHeartbeat: configMs(m, groupcfg.BrokerMinHeartbeatIntervalMs), maxHeartbeat: configMs(m, groupcfg.BrokerMaxHeartbeatIntervalMs),
		session: configMs(m, groupcfg.BrokerSessionTimeoutMs), heartbeat: configMs(m, groupcfg.BrokerHeartbeatIntervalMs),
	}
}

// configMs reads a config in milliseconds; 0 when absent or not a number.
func configMs(m map[string]string, k string) time.Duration {
	n, err := strconv.Atoi(m[k])
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// clampTo returns d within [lo, hi], a 0 bound meaning none.
func clampTo(d, lo, hi time.Duration) time.Duration {
	if lo > 0 && d < lo {
		d = lo
	}
	if hi > 0 && d > hi {
		d = hi
	}
	return d
}

// ensureSessionTimeout sets the group's share session timeout and
// heartbeat interval as [SessionTimeout] asks; current and own are the
// group's configs as describeGroupConfigs found them. It fails only for
// an explicit SessionTimeout the worker is not allowed to set; a value the
// brokers refuse is logged, once, with the failover time the group gets.
func (w *Worker) ensureSessionTimeout(ctx context.Context, admin *kgo.Client, current map[string]string, own map[string]bool) error {
	want := w.cfg.sessionTimeout
	if want == 0 {
		return nil
	}
	explicit := w.cfg.sessionSet
	// Kafka describes the group's effective values; kfake only those set
	// on the group, so fall back to the broker's defaults.
	haveS, haveH := configMs(current, groupcfg.SessionTimeoutMs), configMs(current, groupcfg.HeartbeatIntervalMs)
	keep := func() bool { // an operator's choice, or already as short
		return !explicit && (own[groupcfg.SessionTimeoutMs] || haveS > 0 && haveS <= want)
	}
	if keep() {
		return nil // without reading broker configs: a worker needs no ACL on the cluster
	}
	b := readSessionBounds(ctx, admin)
	if haveS == 0 {
		haveS = b.session
	}
	if haveH == 0 {
		haveH = b.heartbeat
	}
	if keep() {
		return nil
	}
	log := w.cfg.logger.With("group", w.cfg.group)

	// The nearest values the broker allows.
	s := clampTo(want, b.minSession, b.maxSession)
	h := clampTo(heartbeatFor(s), b.minHeartbeat, b.maxHeartbeat)
	refused := s != want || h != heartbeatFor(want)
	if refused {
		if s >= haveS || h >= s {
			// Nothing to gain (a default broker: 45 s is its default
			// and its minimum).
			s, h = haveS, haveH
		}
		w.logSessionRefused(want, s, h, b, "")
		if s == haveS && h == haveH {
			return nil
		}
	} else if s == haveS && h == haveH {
		return nil
	}
	// Both in one request: the broker checks session > heartbeat against
	// the other's current value otherwise.
	err := groupcfg.Set(ctx, admin, w.cfg.group, map[string]string{
		groupcfg.SessionTimeoutMs:    strconv.FormatInt(s.Milliseconds(), 10),
		groupcfg.HeartbeatIntervalMs: strconv.FormatInt(h.Milliseconds(), 10),
	})
	switch {
	case err != nil && acl.Denied(err) && explicit:
		return w.notAuthorized(admin, acl.Right{Op: "AlterConfigs", Resource: acl.Group, Name: w.cfg.group},
			fmt.Errorf("SessionTimeout(%v): %w", want, err))
	case err != nil && acl.Denied(err):
		log.Warn("a crashed worker's partitions move to the other workers only after the group's session timeout, and the worker may not shorten it",
			"failover_within", haveS+haveH, "session_timeout", haveS, "heartbeat_interval", haveH,
			"fix", fmt.Sprintf("grant ALTER_CONFIGS on the group, or set it with kafka-configs.sh --bootstrap-server %s --alter --entity-type groups --entity-name %s --add-config %s=%d,%s=%d",
				w.bootstrap(), w.cfg.group, groupcfg.SessionTimeoutMs, s.Milliseconds(), groupcfg.HeartbeatIntervalMs, h.Milliseconds()))
	case err != nil && !refused:
		// Bounds the broker did not report (no DESCRIBE_CONFIGS on the
		// cluster), or brokers that do not know the configs.
		w.logSessionRefused(want, haveS, haveH, b, err.Error())
	case err != nil:
		log.Warn("setting the group's session timeout failed", "error", err.Error())
	default:
		log.Info("set the group's session timeout: a crashed worker's partitions move to the others within about its length plus the heartbeat interval",
			"session_timeout", s, "heartbeat_interval", h)
	}
	return nil
}

// logSessionRefused logs the one line that says the brokers do not allow
// the session timeout asked for: the failover time the group gets instead
// (got and gotH, 0 if unknown) and the broker settings that allow it.
func (w *Worker) logSessionRefused(want, got, gotH time.Duration, b sessionBounds, brokerSaid string) {
	wantH := heartbeatFor(want)
	var fix []string
	if b.minSession == 0 || want < b.minSession {
		if b.maxSession == 0 || want <= b.maxSession {
			fix = append(fix, fmt.Sprintf("%s=%d", groupcfg.BrokerMinSessionTimeoutMs, want.Milliseconds()))
		}
	}
	if b.maxSession > 0 && want > b.maxSession {
		fix = append(fix, fmt.Sprintf("%s=%d", groupcfg.BrokerMaxSessionTimeoutMs, want.Milliseconds()))
	}
	if b.minHeartbeat == 0 || wantH < b.minHeartbeat {
		fix = append(fix, fmt.Sprintf("%s=%d", groupcfg.BrokerMinHeartbeatIntervalMs, wantH.Milliseconds()))
	}
	if b.maxHeartbeat > 0 && wantH > b.maxHeartbeat {
		fix = append(fix, fmt.Sprintf("%s=%d", groupcfg.BrokerMaxHeartbeatIntervalMs, wantH.Milliseconds()))
	}
	args := []any{"asked", want}
	if got > 0 {
		args = append(args, "failover_within", got+gotH, "session_timeout", got, "heartbeat_interval", gotH)
	}
	if brokerSaid != "" {
		args = append(args, "error", brokerSaid)
	}
	args = append(args, "fix", "set the broker configs "+strings.Join(fix, " and ")+" (or beyond) on every broker")
	w.cfg.logger.With("group", w.cfg.group).Warn("the brokers do not allow the session timeout asked for: a crashed worker's partitions move to the other workers only after the group's session timeout", args...)
}
