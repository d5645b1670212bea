package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/member"
)

// The stall heal (HealStalls): a worker that finds a partition stalled
// (stall.go) frees it itself, as restarting the partition's leader would,
// without losing a record or spending a delivery.
//
// What frees it (measured on Kafka 4.3.1 and 4.4.0, RELIABILITY.md "A
// partition the broker stops serving"): the broker drops a group's share
// partitions from its cache, and reads their state again at the next
// fetch, when a connection that carried a share session of the group
// closes and the group has no share session left on that broker. A
// ShareFetch of session epoch 0 as a member replaces that member's
// session; sent on a connection of its own, which then closes, it takes
// the member's session away with it. So the healer "pokes" every member
// of the group, one connection each, and the last close empties the
// group on the leader.
//
// What keeps it free of loss and redeliveries: a session that goes
// releases the records its member holds (they would come again, a
// delivery spent, and the member's acks of them would fail). So the
// healer pokes only once every member holds nothing:
//
//  1. No whole-group pause may be in force (an operator's, which a heal
//     neither overwrites nor lifts, or another worker's heal): then it
//     does not try.
//  2. It pauses the group on the control topic (By healBy): every worker
//     stops fetching within a second; jobs running end and are acked;
//     jobs that would wait for the pause are copied for later at once
//     (topicpause.go, healPaused): no delivery spent.
//  3. It waits, up to healQuietWait, until every member of the group
//     (DescribeShareGroups) has published a status (internal/fleet) at
//     least a fetch's wait after the pause, paused by it, holding no
//     record. A member with no status, or still holding records (a job
//     running long, jobs waiting for their keys, snoozed jobs held until
//     due), and the healer gives up: it resumes and logs why.
//  4. It pokes every member on the partition's leader, one connection
//     each, waits a second for the broker's disconnect handling, and
//     resumes the group if the pause in force is still its own.
//  5. Each member's next request finds its session gone
//     (SHARE_SESSION_NOT_FOUND, or INVALID_SHARE_SESSION_EPOCH) and the
//     member opens a new one, as after a broker restart (internal/member,
//     sessionFailed); it held nothing, so nothing is lost.
//  6. The partition is freed when the group's start offset on it moves
//     within healVerdictWait.
//
// Tried when the stall check reports a partition and every healEvery
// while it stays stalled; bounded to one try per partition per healEvery
// in each worker, and none for healEvery after another worker's heal was
// in force (watchPauses), so the fleet tries about once per healEvery; a
// try that finds another worker's heal in force is a try. One Warn line per
// try, with the partition, its leader and the result; the observer
// (StallHealObserver) counts it.
type healer struct {
	w   *Worker
	cl  *kgo.Client
	adm *kadm.Client
	ctl *control.Client
	log *slog.Logger
	obs StallHealObserver
	// self names this worker in the pause's reason.
	self string
	// tried is when each partition's last try began.
	tried map[topicPartition]time.Time
	// sawHeal is when this worker last had another worker's heal pause
	// in force (watchPauses).
	sawHeal time.Time
	// last is the last try, for a test.
	last *healTry
}

// The results a heal try is counted with (StallHealObserver).
const (
	// HealFreed: the group's start offset on the partition moved after
	// the heal.
	HealFreed = "freed"
	// HealStillStalled: the heal poked every member and the partition
	// did not move.
	HealStillStalled = "still_stalled"
	// HealSkipped: the heal did not poke: a pause of the group was in
	// force, a member held records or published no status, or a request
	// failed. The log line says which.
	HealSkipped = "skipped"
)

const (
	// healEvery bounds the tries: one per partition per healEvery in
	// each worker.
	healEvery = 10 * time.Minute
	// healBy is the By of a heal's pause on the control topic.
	healBy = "shareq stall heal"
	// healQuietWait is how long the healer waits, the group paused, for
	// every member to hold nothing.
	healQuietWait = 30 * time.Second
	// healVerdictWait is how long after the resume the start offset has
	// to move for the try to count as freed.
	healVerdictWait = 30 * time.Second
	// healDisconnect is the wait after the last poke: the broker handles
	// a connection's close on a thread of its own.
	healDisconnect = time.Second
	// healStaleAfter is how old a heal's pause of the group must be for
	// any worker with HealStalls to lift it (liftStale): a heal resumes
	// well within it (a healer stops poking at half of it), so an older
	// one lost its healer, a worker killed mid-heal, and would keep the
	// group paused until an operator resumed it.
	healStaleAfter = 3 * time.Minute
)

// HealStalls has the worker free a stalled partition itself (default
// off): when its stall check finds one (records wait, the broker
// acquires none, RELIABILITY.md "A partition the broker stops serving"),
// it pauses the group through the control topic, waits until every
// member holds nothing (their statuses on the status topic say so),
// replaces every member's share session on the partition's leader with
// an empty one on a connection it then closes, which makes the broker
// read the partition's state again (what a restart of the leader does),
// and resumes. Jobs in hand that would wait for the heal's pause are
// copied for later at once (no delivery spent; the copies run after the
// resume). A member still holding records after 30 s (a long job, jobs
// waiting for their keys, snoozed jobs held until due) or publishing no
// status makes it give up (resume, no
// record touched), as does a pause of the group already in force: an
// operator's pause is never overwritten or lifted. A heal's pause older
// than 3 minutes lost its healer (a worker killed mid-heal): any worker
// with HealStalls lifts it. One try per
// partition per 10 minutes, one Warn line per try, counted by a
// [StallHealObserver]. It needs the control topic ([ControlTopic]) and
// the status topic ([StatusTopic]), and the rights to write the first
// and read the second and to describe the group.
func HealStalls(on bool) Option {
	return optionFunc(func(c *config) { c.healStalls = on })
}

func (c *config) checkHeal(bad func(format string, args ...any)) {
	if !c.healStalls {
		return
	}
	if c.control.topic == "" {
		bad("HealStalls(true): the heal pauses the group through the control topic, and ControlTopic is \"\"; name one, or leave HealStalls off")
	}
	if c.status.topic == "" {
		bad("HealStalls(true): the heal reads the members' statuses, and StatusTopic is \"\"; name one, or leave HealStalls off")
	}
}

// StallHealObserver is an optional extension of [Observer]: an observer
// that also implements it hears each try of [HealStalls] at a stalled
// partition, with its result: [HealFreed], [HealStillStalled] or
// [HealSkipped]. metrics.Metrics implements it
// (shareq_stall_heals_total).
type StallHealObserver interface {
	StallHealed(topic string, partition int32, result string)
}

type nopStallHealObserver struct{}

func (nopStallHealObserver) StallHealed(string, int32, string) {}

// newHealer returns the worker's healer, or nil when HealStalls is off
// or the control client cannot be made (logged).
func (w *Worker) newHealer(cl *kgo.Client, log *slog.Logger, self string) *healer {
	if !w.cfg.healStalls {
		return nil
	}
	ctl, err := control.New(cl, control.Topic(w.cfg.control.topic))
	if err != nil {
		log.Warn("HealStalls is on but the worker cannot make a control client: it will not heal stalls", "control_topic", w.cfg.control.topic, "error", err)
		return nil
	}
	obs, ok := w.cfg.observer.(StallHealObserver)
	if !ok {
		obs = nopStallHealObserver{}
	}
	return &healer{w: w, cl: cl, adm: kadm.NewClient(cl), ctl: ctl, log: log, obs: obs, self: self, tried: map[topicPartition]time.Time{}}
}

// healTry is one try's facts, for its log line.
type healTry struct {
	tp     topicPartition
	start  int64 // the group's start offset at the stall
	leader int32
	began  time.Time
	poked  int
	why    string // what the result rests on
}

// heal tries to free tp, stalled at start offset start, unless it was
// tried less than healEvery ago, and returns the try's result ("" when
// not tried) once it is over.
func (h *healer) heal(ctx context.Context, tp topicPartition, start int64) string {
	now := time.Now()
	if last, ok := h.tried[tp]; ok && now.Sub(last) < healEvery {
		return ""
	}
	if !h.sawHeal.IsZero() && now.Sub(h.sawHeal) < healEvery {
		return "" // another worker's heal was in force lately
	}
	h.tried[tp] = now
	t := &healTry{tp: tp, start: start, leader: -1, began: now}
	result := h.try(ctx, t)
	h.last = t
	args := []any{"topic", tp.topic, "partition", tp.partition, "leader", t.leader, "result", result,
		"members_poked", t.poked, "took", time.Since(t.began).Round(time.Millisecond)}
	h.log.Warn("stall heal: "+t.why, args...)
	h.obs.StallHealed(tp.topic, tp.partition, result)
	return result
}

// try runs the steps of one heal and returns its result, t.why saying
// what it rests on.
func (h *healer) try(ctx context.Context, t *healTry) string {
	var err error
	if t.leader, err = h.leader(ctx, t.tp); err != nil {
		t.why = "the partition's leader is not known (" + err.Error() + "); nothing done"
		return HealSkipped
	}
	st, err := h.ctl.Read(ctx)
	if err != nil {
		t.why = "the control topic cannot be read (" + err.Error() + "); nothing done"
		return HealSkipped
	}
	if p, ok := st.Paused(h.w.cfg.group, ""); ok {
		t.why = "the group is paused already (" + p.String() + "); a heal neither overwrites nor lifts a pause; nothing done"
		return HealSkipped
	}
	pause := control.Pause{Group: h.w.cfg.group, By: healBy, At: time.Now(),
		Reason: fmt.Sprintf("partition %s/%d stalled on broker %d: %s frees it (every member's share session there closed at once); resumed within a minute", t.tp.topic, t.tp.partition, t.leader, h.self)}
	if err := h.ctl.Pause(ctx, pause); err != nil {
		t.why = "the group could not be paused (" + err.Error() + "); nothing done"
		return HealSkipped
	}
	ids, why := h.quiet(ctx, pause)
	if ids == nil {
		h.resume(ctx, pause)
		t.why = why + "; nothing poked (the group resumed unless the pause in force is another's)"
		return HealSkipped
	}
	for _, id := range ids {
		if time.Since(pause.At) > h.w.cfg.healStale/2 {
			h.resume(ctx, pause)
			t.why = fmt.Sprintf("the heal's pause lasted %v before member %s was poked, half of what the other workers wait before they lift a heal's pause as stale; the group resumed", time.Since(pause.At).Round(time.Second), id)
			return HealSkipped
		}
		if err := h.pokeMember(ctx, t.leader, id); err != nil {
			h.resume(ctx, pause)
			t.why = fmt.Sprintf("the empty share session as member %s failed (%v); the group resumed", id, err)
			return HealSkipped
		}
		t.poked++
	}
	sleepCtx(ctx, healDisconnect)
	h.resume(ctx, pause)
	resumed := time.Now()
	if moved, at := h.moved(ctx, t); moved {
		t.why = fmt.Sprintf("every member's share session on the leader was replaced and closed with the group paused; the start offset moved to %d", at)
		return HealFreed
	}
	if ctx.Err() != nil {
		t.why = "every member's share session on the leader was replaced and closed with the group paused; the worker stopped before the start offset moved"
		return HealStillStalled
	}
	t.why = fmt.Sprintf("every member's share session on the leader was replaced and closed with the group paused, and the start offset stayed at %d for %v after the resume: restart the leader", t.start, time.Since(resumed).Round(time.Second))
	return HealStillStalled
}

// leader returns the broker that leads tp.
func (h *healer) leader(ctx context.Context, tp topicPartition) (int32, error) {
	md, err := h.adm.Metadata(ctx, tp.topic)
	if err != nil {
		return -1, err
	}
	d, ok := md.Topics[tp.topic]
	if !ok || d.Err != nil {
		return -1, cmp.Or(d.Err, error(kerr.UnknownTopicOrPartition))
	}
	p, ok := d.Partitions[tp.partition]
	if !ok || p.Leader < 0 {
		return -1, errors.New("no leader")
	}
	return p.Leader, nil
}

// quiet waits, up to healQuietWait, until every member of the group has
// a status published at least a fetch's wait after pause, paused by it
// and holding nothing, and returns their member IDs; nil and why not
// when they do not.
func (h *healer) quiet(ctx context.Context, pause control.Pause) ([]string, string) {
	settled := pause.At.Add(h.w.cfg.fetchMaxWait + time.Second)
	deadline := time.Now().Add(h.w.cfg.healQuiet)
	why := ""
	for {
		if replaced, why := h.replaced(ctx, pause); replaced {
			return nil, why
		}
		ids, notYet, err := h.members(ctx, pause, settled)
		switch {
		case err != nil:
			why = err.Error()
		case notYet == "":
			return ids, ""
		default:
			why = notYet
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Sprintf("the members did not all hold nothing within %v of the pause: %s", h.w.cfg.healQuiet, why)
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

// replaced reports whether the pause in force is no longer pause (two
// workers that found the partition stalled at once both paused, and the
// later write won; or an operator paused the group meanwhile), and why.
// A control topic that cannot be read says nothing.
func (h *healer) replaced(ctx context.Context, pause control.Pause) (bool, string) {
	st, err := h.ctl.Read(ctx)
	if err != nil {
		return false, ""
	}
	p, ok := st.Paused(h.w.cfg.group, "")
	switch {
	case !ok:
		return true, "the heal's pause was lifted by someone else"
	case !samePause(p, pause):
		return true, "another pause replaced the heal's (" + p.String() + ")"
	}
	return false, ""
}

func samePause(a, b control.Pause) bool {
	return a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At)
}

// members returns the group's member IDs and, when one of them is not
// quiet yet (no status since settled, not paused by pause, holding
// records), what it is.
func (h *healer) members(ctx context.Context, pause control.Pause, settled time.Time) ([]string, string, error) {
	described, err := h.adm.DescribeShareGroups(ctx, h.w.cfg.group)
	if err != nil {
		return nil, "", fmt.Errorf("the group cannot be described (%w)", err)
	}
	g := described[h.w.cfg.group]
	if g.Err != nil {
		return nil, "", fmt.Errorf("the group cannot be described (%w)", g.Err)
	}
	statuses, err := fleet.Read(ctx, h.cl, h.w.cfg.status.topic, time.Now())
	if err != nil {
		return nil, "", fmt.Errorf("the members' statuses cannot be read (%w)", err)
	}
	byMember := map[string]fleet.Status{}
	for _, s := range fleet.OfGroup(statuses, h.w.cfg.group) {
		if s.MemberID != "" && (byMember[s.MemberID].LastSeen.Before(s.LastSeen)) {
			byMember[s.MemberID] = s
		}
	}
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.MemberID)
		if why := notQuiet(byMember[m.MemberID], m.MemberID, pause, settled); why != "" {
			return ids, why, nil
		}
	}
	if len(ids) == 0 {
		return nil, "", errors.New("the group has no member")
	}
	return ids, "", nil
}

// notQuiet says why the member's status s does not show it paused by
// pause and holding nothing since settled; "" when it does.
func notQuiet(s fleet.Status, id string, pause control.Pause, settled time.Time) string {
	switch {
	case s.Instance == "":
		return "member " + id + " publishes no status (not a shareq worker, or its StatusTopic differs or is off)"
	case s.LastSeen.Before(settled):
		return "member " + id + " (" + s.Name + ") has published no status since the pause settled"
	case !pausedBy(s, pause):
		return "member " + id + " (" + s.Name + ") is not paused by the heal yet"
	case s.Held > 0:
		other := s.Held - s.Running - s.Buffered - s.Waiting - s.Snoozed
		return fmt.Sprintf("member %s (%s) holds %d records (%d running, %d waiting for a handler, %d waiting for their keys, %d snoozed, %d held otherwise: for a pause or a dependency, or being copied)",
			id, s.Name, s.Held, s.Running, s.Buffered, s.Waiting, s.Snoozed, max(other, 0))
	}
	return ""
}

// pausedBy reports whether every topic of s is paused by pause.
func pausedBy(s fleet.Status, pause control.Pause) bool {
	for _, t := range s.Topics {
		if !slices.ContainsFunc(s.Paused, func(p fleet.PausedTopic) bool {
			return p.Topic == t && p.By == pause.By && p.Reason == pause.Reason
		}) {
			return false
		}
	}
	return true
}

// pokeMember replaces member id's share session on broker leader with an
// empty one (member.ReplaceSession) on a client of its own, and closes
// that client, whose connection takes the session with it.
func (h *healer) pokeMember(ctx context.Context, leader int32, id string) error {
	cl, err := kgo.NewClient(h.w.baseOpts()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return member.ReplaceSession(ctx, cl, leader, h.w.cfg.group, id)
}

// watchPauses looks at the heal pauses this worker has applied. One in
// force is another worker's try: this worker then tries none for
// healEvery (heal), so that the fleet, not each worker, tries about once
// per healEvery (while a partition stalls, every worker's check finds
// it, most at once). One older than healStale lost its healer (a worker
// killed mid-heal) and nobody else would lift it: it is lifted (the
// control topic read only then).
func (h *healer) watchPauses(ctx context.Context, now time.Time) {
	stale := false
	for _, p := range h.w.PausedTopics() {
		if p.By == healBy {
			h.sawHeal = now
			stale = stale || now.Sub(p.Since) > h.w.cfg.healStale
		}
	}
	if !stale {
		return
	}
	st, err := h.ctl.Read(ctx)
	if err != nil {
		return
	}
	p, ok := st.Paused(h.w.cfg.group, "")
	if !ok || p.By != healBy || now.Sub(p.At) <= h.w.cfg.healStale {
		return
	}
	if err := h.ctl.Resume(ctx, h.w.cfg.group, ""); err != nil {
		h.log.Warn("stall heal: a heal's pause outlived its healer and could not be lifted; trying again at the next check", "paused_at", p.At, "reason", p.Reason, "error", err)
		return
	}
	h.log.Warn("stall heal: a heal's pause outlived its healer (a worker stopped mid-heal): lifted", "paused_at", p.At, "paused_for", now.Sub(p.At).Round(time.Second), "reason", p.Reason)
}

// resume ends the heal's pause if the pause in force is still its own.
func (h *healer) resume(ctx context.Context, pause control.Pause) {
	// The resume must go out even when the worker is stopping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for range 3 {
		st, err := h.ctl.Read(ctx)
		if err == nil {
			p, ok := st.Paused(h.w.cfg.group, "")
			if !ok || !samePause(p, pause) {
				return // lifted, or replaced by someone else's: not ours to lift
			}
			if err = h.ctl.Resume(ctx, h.w.cfg.group, ""); err == nil {
				return
			}
		}
		h.log.Warn("stall heal: the group's pause could not be lifted; trying again", "error", err)
		sleepCtx(ctx, time.Second)
	}
	h.log.Error("stall heal: the group's pause could not be lifted: resume it with shareq resume -group "+h.w.cfg.group, "paused_by", pause.By)
}

// moved waits, up to healVerdictWait, for the group's start offset on
// t.tp to move from t.start, and returns where it went.
func (h *healer) moved(ctx context.Context, t *healTry) (bool, int64) {
	deadline := time.Now().Add(h.w.cfg.healVerdict)
	for {
		d, err := h.adm.DescribeShareGroupOffsets(ctx, h.w.cfg.group)
		if err == nil && d[h.w.cfg.group].Err == nil {
			if so, ok := d[h.w.cfg.group].Offsets.Lookup(t.tp.topic, t.tp.partition); ok && so.Err == nil && so.StartOffset >= 0 && so.StartOffset != t.start {
				return true, so.StartOffset
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, t.start
		}
		sleepCtx(ctx, time.Second)
	}
}

// healSelf names the worker in a heal's pause: its client ID and member.
func healSelf(clientID, memberID string) string {
	return "worker " + strings.TrimSpace(clientID+" (member "+memberID+")")
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
