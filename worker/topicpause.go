package worker

import (
	"cmp"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
)

// Operator pauses (docs/operating.md, "Pause and resume"): an operator
// pauses one topic for a group, or the whole group, and the worker stops
// acquiring and starting that topic's jobs. Unlike the dependency pause
// (pause.go), which the worker decides for itself, this one is decided
// elsewhere and applied to whatever is in hand:
//
//   - the member fetches nothing more of the topic (member.PauseTopics):
//     its partitions stay assigned, so a resume just fetches again;
//   - a job of the topic that would start (queued, let go by its key,
//     rerun after a dependency pause) waits instead (jobHalted): no
//     handler slot, its lock renewed by the tracker, no delivery spent;
//     running jobs finish as usual;
//   - at MaxHold a job that waits is copied for later (copyOut) and
//     accepted, as a snoozed one is: no delivery spent; under a stall
//     heal's pause (heal.go) at once, so that the member holds nothing;
//   - on resume the jobs that waited start first, in the order they came,
//     ahead of the queue;
//   - a stop while paused copies what waits, once the member is quiet
//     (releaseHeld): the job cannot run before the stop ends, a release
//     would spend a delivery and hand the record back to a group whose
//     other workers are paused too, and a copy keeps it for the resume.

// TopicPause is an operator's pause of one of the worker's topics, as the
// worker applies it ([Worker.PausedTopics]); a pause of the whole group
// is a pause of each of its topics.
type TopicPause struct {
	Topic string
	// Reason and By are the operator's words: why, and who paused it.
	Reason, By string
	// Since is when the pause took effect in this worker.
	Since time.Time
}

// PausedTopicObserver is an optional extension of [Observer]: an
// observer that also implements it hears when an operator's pause of a
// topic takes effect in the worker and when it ends. Called on the
// worker's loop: return at once. When it is called,
// [Worker.PausedTopics] already includes the change. metrics.Metrics
// implements it.
type PausedTopicObserver interface {
	// TopicPaused is called when a pause of topic takes effect.
	TopicPaused(topic, reason, by string)
	// TopicResumed is called when the pause of topic ends, or the
	// worker stops while it lasts; paused is how long it lasted in this
	// worker.
	TopicResumed(topic string, paused time.Duration)
}

// applyControl applies st, the control topic's state: the pauses and the
// limits (livelimits.go) of the worker's group.
func (x *executor) applyControl(st control.State) {
	x.applyPauses(pausesOf(st, x.cfg.Group, x.cfg.Handlers))
	x.applyLimits(st, x.now())
}

// pausesOf returns the pauses of st that stop the handled topics of
// group: each topic's own, or the group's.
func pausesOf(st control.State, group string, handled map[string]handler.Handler) map[string]TopicPause {
	ps := map[string]TopicPause{}
	for t := range handled {
		if p, ok := st.Paused(group, t); ok {
			ps[t] = TopicPause{Topic: t, Reason: p.Reason, By: p.By}
		}
	}
	return ps
}

// topicPaused reports whether an operator paused topic.
func (x *executor) topicPaused(topic string) bool {
	_, ok := x.topicPauses[topic]
	return ok
}

// applyPauses makes ps (by topic; topics the worker does not handle are
// ignored) the pauses in effect: the member stops or starts fetching, the
// queued jobs of newly paused topics wait, and those of resumed ones
// start first.
func (x *executor) applyPauses(ps map[string]TopicPause) {
	now := x.now()
	changed := false
	// The observer hears of the changes after they are published, so
	// that PausedTopics agrees with what it was told.
	var heard []func(PausedTopicObserver)
	for _, t := range slices.Sorted(maps.Keys(ps)) {
		p := ps[t]
		if x.cfg.Handlers[t] == nil {
			continue
		}
		if cur, ok := x.topicPauses[t]; ok {
			p.Since = cur.Since
			x.topicPauses[t] = p // a new reason or author, the same pause
			continue
		}
		p.Topic, p.Since = t, now
		x.topicPauses[t] = p
		changed = true
		x.haltTopic(t, now)
		x.log.Info("topic paused by "+p.By+": "+p.Reason, "topic", t, "jobs_in_hand", x.inHand(t))
		heard = append(heard, func(po PausedTopicObserver) { po.TopicPaused(t, p.Reason, p.By) })
	}
	for _, t := range slices.Sorted(maps.Keys(x.topicPauses)) {
		cur := x.topicPauses[t]
		if _, ok := ps[t]; ok {
			continue
		}
		delete(x.topicPauses, t)
		changed = true
		waited := x.unhaltTopic(t, now)
		paused := now.Sub(cur.Since)
		x.log.Info("topic resumed", "topic", t, "paused_for", paused.Round(time.Millisecond), "jobs_waited", waited, "paused_by", cur.By)
		heard = append(heard, func(po PausedTopicObserver) { po.TopicResumed(t, paused) })
	}
	if changed {
		x.m.PauseTopics(slices.Sorted(maps.Keys(x.topicPauses)))
	}
	x.publishTopicPauses()
	if po, ok := x.obs.(PausedTopicObserver); ok {
		for _, h := range heard {
			h(po)
		}
	}
}

// endTopicPauses tells the observer that the pauses in effect end with
// the executor: it stopped while they lasted.
func (x *executor) endTopicPauses() {
	ended := x.topicPauses
	x.topicPauses = map[string]TopicPause{}
	x.publishTopicPauses()
	if po, ok := x.obs.(PausedTopicObserver); ok {
		for t, p := range ended {
			po.TopicResumed(t, time.Since(p.Since))
		}
	}
}

// inHand counts the jobs of topic the executor has, whatever their state.
func (x *executor) inHand(topic string) int {
	n := 0
	for k := range x.jobs.All() {
		if k.Topic == topic {
			n++
		}
	}
	return n
}

// haltTopic has the queued jobs of topic wait for its pause, in their
// order.
func (x *executor) haltTopic(topic string, now time.Time) {
	x.eachQueued(func(j *xjob) {
		if j.state == jobQueued && j.job.Topic == topic {
			x.halt(j, now)
		}
	})
}

// halt has j, a job of a paused topic about to start (or just delivered,
// or queued when the pause came), wait for the pause; once the member is
// quiet in a stop, or when the pause is a stall heal's, it is copied for
// later instead.
func (x *executor) halt(j *xjob, now time.Time) {
	x.leaveState(j)
	j.state = jobHalted
	x.halted++
	if !j.ran {
		x.track(j, now) // a job that ran is in the tracker since its start, or young (trackLater)
	}
	if x.phase >= phaseReleasing || x.healPaused(j.job.Topic) {
		x.copyOut(j, now)
		return
	}
	x.haltLine = append(x.haltLine, j)
}

// healPaused reports whether topic is paused by a stall heal (heal.go).
// A heal replaces every member's share session, which would release what
// a member holds (a delivery spent), so it waits until no member holds a
// record; jobs that would wait for its pause are copied for later at once
// instead (no delivery spent, their copies run after the resume), as at
// a stop.
func (x *executor) healPaused(topic string) bool {
	p, ok := x.topicPauses[topic]
	return ok && p.By == healBy
}

// unhaltTopic ends the wait of topic's jobs, oldest first: a job that ran
// already (let go by its key, or held through a dependency pause) runs
// again with the reruns; one that waited more than half of MaxHold, which
// counts from its wait, is copied for now, so that its run gets a whole
// MaxHold; the others go back to the head of the queue, ahead of the
// records fetched since. It returns how many waited.
func (x *executor) unhaltTopic(topic string, now time.Time) int {
	var front []*xjob
	kept := x.haltLine[:0]
	waited := 0
	for _, j := range x.haltLine {
		switch {
		case j.state != jobHalted || x.jobs.Get(j.key()) != j:
			continue // ended meanwhile
		case j.job.Topic != topic:
			kept = append(kept, j)
			continue
		}
		waited++
		switch {
		case j.ran:
			x.halted--
			j.state = jobPaused // the reruns' state (startReruns)
			x.reruns = append(x.reruns, j)
		case j.tracked && now.Sub(j.held.heldSince) > x.cfg.MaxHold/2:
			x.copyOut(j, now)
		default:
			x.halted--
			j.state = jobQueued
			x.queued++
			front = append(front, j)
		}
	}
	clear(x.haltLine[len(kept):])
	x.haltLine = kept
	x.requeueFront(front)
	return waited
}

// publishTopicPauses publishes the pauses for [Worker.PausedTopics].
func (x *executor) publishTopicPauses() {
	if x.cfg.TopicsPaused == nil {
		return
	}
	if len(x.topicPauses) == 0 {
		x.cfg.TopicsPaused(nil)
		return
	}
	ps := slices.SortedFunc(maps.Values(x.topicPauses), func(a, b TopicPause) int { return cmp.Compare(a.Topic, b.Topic) })
	x.cfg.TopicsPaused(ps)
}

// logTopicPauses adds the paused topics to the stop line's args.
func (x *executor) logTopicPauses(args []any) []any {
	if len(x.topicPauses) == 0 {
		return args
	}
	return append(args, slog.Any("paused_topics", slices.Sorted(maps.Keys(x.topicPauses))), slog.Int("waiting_for_pause", x.halted))
}
