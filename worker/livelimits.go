package worker

import (
	"maps"
	"slices"
	"time"

	"github.com/shareq/shareq/control"
)

// Limits set at run time (package control, `shareq limit`): they replace
// the limits the code declares for a topic, a field at a time. The key
// limits of a topic change as the executor reads them (a raised limit
// lets waiting jobs go at once); a topic rate changes at the moment the
// limit names ([control.Limit.From]), the same on every worker of the
// group, so that no two workers run different rates. A limit cleared, or
// a field left nil, goes back to the code's.

// applyLimits applies the limits of st for the worker's group.
func (x *executor) applyLimits(st control.State, now time.Time) {
	for _, topic := range slices.Sorted(maps.Keys(x.limits)) {
		set, _ := st.Limit(x.cfg.Group, topic)
		x.setKeyLimit(x.limits[topic], set, now)
	}
	if r := x.cfg.Rate; r != nil {
		set, ok := st.Limit(x.cfg.Group, r.base.topic)
		want, at := r.base, now
		if ok && set.Rate != nil {
			want, at = topicRate{topic: r.base.topic, n: set.Rate.N, per: set.Rate.Per}, set.From
		}
		if r.changes(want) {
			x.log.Info("topic rate changed", "topic", want.topic, "rate_limit", want.String(), "from", at.UTC().Format(time.RFC3339Nano),
				"code_rate_limit", r.base.String(), "by", set.By, "reason", set.Reason)
		}
		r.retune(want, at, now)
	}
	x.noteUnlimited(st)
}

// setKeyLimit gives l the key concurrency and rate of set (the code's
// where set has none) and lets the waiters a looser limit admits go.
func (x *executor) setKeyLimit(l *keyLimit, set control.Limit, now time.Time) {
	conc, every := l.baseConc, l.baseEvery
	if set.KeyConcurrency != nil {
		conc = *set.KeyConcurrency
	}
	if set.KeyRate != nil {
		every = set.KeyRate.Per / time.Duration(set.KeyRate.N)
	}
	if conc == l.conc && every == l.every {
		return
	}
	l.conc, l.every = conc, every
	x.log.Info("key limit changed", "topic", l.topic, "key_concurrency", conc, "key_interval", every,
		"code_key_concurrency", l.baseConc, "code_key_interval", l.baseEvery, "by", set.By, "reason", set.Reason)
	for _, ks := range x.keys {
		if ks.id.topic == l.topic && ks.hasWaiters() {
			x.keyFreed(ks, now)
		}
	}
}

// noteUnlimited logs, once per limit written, a limit set for a topic the
// worker handles that it cannot apply: a rate for a topic without
// TopicRate, key limits for a topic without KeyLimit (a limit set at run
// time changes a limit the code declares; it does not add one).
func (x *executor) noteUnlimited(st control.State) {
	for _, set := range st.LimitsOf(x.cfg.Group) {
		if _, handled := x.cfg.Handlers[set.Topic]; !handled || x.limitNoted[set.Topic].Equal(set.At) {
			continue
		}
		noRate := set.Rate != nil && (x.cfg.Rate == nil || x.cfg.Rate.base.topic != set.Topic)
		noKeys := (set.KeyConcurrency != nil || set.KeyRate != nil) && x.limits[set.Topic] == nil
		if !noRate && !noKeys {
			continue
		}
		if x.limitNoted == nil {
			x.limitNoted = map[string]time.Time{}
		}
		x.limitNoted[set.Topic] = set.At
		x.log.Info("a limit set at run time does not apply to this worker: it changes a limit the code declares (worker.TopicRate, worker.KeyLimit) and adds none",
			"topic", set.Topic, "limit", set.String(), "has_topic_rate", !noRate || set.Rate == nil, "has_key_limit", !noKeys)
	}
}
