package worker

// A rate limit on a topic, shared by every worker of the share group
// ([TopicRate]).
//
// Where it acts. A record once fetched is acquired: its lock runs and
// releasing it spends a delivery. So the limit acts on what the worker
// asks to fetch as well as on what it starts: the executor grants the
// member credit only for the jobs the worker's tokens and slots will let
// start within rateLookahead (topUp), and starts a queued job only with a
// token (startQueued). A record that arrives before its slot (or one of
// the rare records a batch_optimized fetch brings past the credit) waits
// in the queue, its lock running, for about a lookahead; none waits into
// a spent delivery.
//
// How the fleet shares it. The limit is a grid of slots on the Unix
// clock, one job each: slot j is the j-th interval of per ÷ n since the
// epoch. The k members of the group subscribed to the topic, counted by a
// ShareGroupDescribe every refresh (rateRefreshDefault) and ordered by
// member ID, own the slots j mod k = their index. A worker starts a job
// in a slot it owns, during that slot, or with one of the few tokens it
// keeps from its past slots (rateLimiter.burst). Since no two workers own
// one slot, no 1 s window holds more than the limit and a tenth of it
// (one job below 10 a second), whatever the number of workers; the
// workers' clocks must agree to well within a slot (NTP does).
//
// Joins, leaves, crashes: ratePlanner's rules keep any two workers'
// slots apart whichever counts they have seen. A worker that stops
// gracefully stops starting jobs before it leaves; a SIGKILLed member
// stays in the group until its session times out (SessionTimeout), and
// its slots go unused meanwhile: the fleet runs below the limit, never
// above it.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	// rateRefreshDefault is how often a rate-limited worker describes its
	// group to count the members that share the limit.
	rateRefreshDefault = 2 * time.Second
	// rateBurst is how much of the limit the fleet's workers keep
	// together from their past slots (less one job), and rateLookahead
	// how far ahead of its slots a worker asks for records, so a fetch's
	// round trip costs no rate.
	rateBurst     = 100 * time.Millisecond
	rateLookahead = 100 * time.Millisecond
	// rateLookaheadMax bounds how far the lookahead grows when records
	// come too late for their slots (rateLimiter.stretch), and
	// rateLookaheadEase is how long it keeps a length before halving
	// what it grew.
	rateLookaheadMax  = time.Second
	rateLookaheadEase = 30 * time.Second
	// rateSharePoll is how often a worker with no share yet (joining, or
	// its count stale) looks again.
	rateSharePoll = 100 * time.Millisecond
	// rateMaxPerSecond bounds a limit: more than this is no limit a token
	// per job can keep.
	rateMaxPerSecond = 1e6
)

// TopicRate limits the jobs of topic that start to n per interval per,
// across every worker of the share group, not per process (for example
// TopicRate("emails", 14, time.Second) for Amazon SES's 14 sends a
// second). The interval is a rate: 600 per minute is 10 a second, not
// 600 at the top of each minute. A worker never fetches a record it
// cannot start within the limit, so waiting for it spends no delivery.
//
// The workers take turns on one grid of slots on the clock (per ÷ n
// each): with k workers subscribed to the topic, counted every 2 s, each
// owns every k-th slot. So no 1 s window holds more than n ÷ per jobs
// and a tenth of that (one job below 10 a second), however many workers
// there are, as long as their clocks agree to well within a slot (NTP
// does). A worker that joins starts jobs only once the others can have
// seen it (after about 4 s); one killed without leaving stays in the
// group until its session times out ([SessionTimeout]) and its slots go
// unused meanwhile: the fleet runs below the limit, never above. Every
// worker of the topic must set the same limit. docs/rate-limits.md has the
// details and measurements.
//
// topic must be registered with [Handle], and for now it must be the
// worker's only topic: a share fetch cannot choose among its topics, so
// run a rate-limited topic on a Worker of its own (several Workers may
// run in one process). Default: no limit.
func TopicRate(topic string, n int, per time.Duration) Option {
	return optionFunc(func(c *config) { c.rates = append(c.rates, topicRate{topic, n, per}) })
}

// topicRate is a [TopicRate] as given.
type topicRate struct {
	topic string
	n     int
	per   time.Duration
}

// perSecond is the limit in jobs per second.
func (r topicRate) perSecond() float64 { return float64(r.n) / r.per.Seconds() }

func (r topicRate) String() string { return fmt.Sprintf("%d/%v", r.n, r.per) }

// checkRates validates the TopicRate options against the topics handled.
func (c *config) checkRates(handled []string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	limited := map[string]bool{}
	for _, r := range c.rates {
		opt := fmt.Sprintf("TopicRate(%q, %d, %v)", r.topic, r.n, r.per)
		switch {
		case !slices.Contains(handled, r.topic):
			bad("%s: no handler for the topic; register it with worker.Handle first", opt)
		case limited[r.topic]:
			bad("%s: the topic's rate is set twice", opt)
		case r.n < 1:
			bad("%s: n must be at least 1 (jobs per interval)", opt)
		case r.per <= 0:
			bad("%s: the interval must be positive, such as time.Second", opt)
		case r.perSecond() > rateMaxPerSecond:
			bad("%s: more than %g jobs a second is no limit; raise the interval or drop the limit", opt, float64(rateMaxPerSecond))
		case len(handled) > 1:
			bad("%s: the worker also handles %q; a rate-limited topic needs a Worker of its own (a share fetch cannot choose among a worker's topics): make another worker.New for it, in the same process if you like",
				opt, slices.DeleteFunc(slices.Clone(handled), func(t string) bool { return t == r.topic }))
		}
		limited[r.topic] = true
	}
	if c.rateRefresh <= 0 {
		bad("rate refresh %v: must be positive", c.rateRefresh)
	}
	return errs
}

// rateShare is this worker's part of the limit, as its latest describes
// of the group said. The limit is a grid of slots, one job each, on the
// Unix clock (slot j is the j-th interval of per ÷ n since the epoch);
// the worker is index (from 0) of the members counted, in member ID
// order, and owns the slots j with j mod members = index. While the
// members change it owns only the slots it owns both before and after
// (prevMembers, prevIndex), so that no other worker, whichever of the two
// counts it has seen, owns one of them.
type rateShare struct {
	members, index         int
	prevMembers, prevIndex int       // 0 members: no change under way
	perSecond              float64   // the jobs a second its slots come to
	until                  time.Time // it holds until then, unless a newer describe comes first
}

// sameSlots reports whether s and o own the same slots (o may be nil).
func (s *rateShare) sameSlots(o *rateShare) bool {
	return o != nil && s.members == o.members && s.index == o.index && s.prevMembers == o.prevMembers && s.prevIndex == o.prevIndex
}

// nextOwned returns the first slot after j the worker owns, if any.
func (s *rateShare) nextOwned(j int64) (int64, bool) {
	for i, period := int64(1), int64(s.members*max(1, s.prevMembers)); i <= period; i++ {
		if s.owns(j + i) {
			return j + i, true
		}
	}
	return 0, false
}

// owns reports whether the worker owns slot j.
func (s *rateShare) owns(j int64) bool {
	if j%int64(s.members) != int64(s.index) {
		return false
	}
	return s.prevMembers == 0 || j%int64(s.prevMembers) == int64(s.prevIndex)
}

// rateLimiter is one worker's tokens for a rate-limited topic: a token
// for each slot it owns, usable during that slot, and at most burst more
// kept from its past slots. watchRate publishes the worker's share; the
// executor's goroutine owns the rest.
type rateLimiter struct {
	base topicRate // the TopicRate the code declares

	share atomic.Pointer[rateShare] // written by watchRate, read by the executor and MemberStats
	shown atomic.Pointer[topicRate] // the rate in force, for MemberStats and watchRate's lines

	// Owned by the executor's goroutine.
	rate  topicRate   // the rate in force: base, or one set at run time (retune)
	limit float64     // rate in jobs per second
	slot  float64     // a slot's length in nanoseconds
	next  *rateSwitch // a rate to switch to; nil: none

	plan     *rateShare // the share the tokens were counted under; nil: none
	armedAt  time.Time  // when the timer fires, if after now
	lastSlot int64      // the newest slot counted
	cur      bool       // lastSlot is owned and its token not used yet
	held     int        // tokens of past slots, at most burst
	timer    *time.Timer
	// The lookahead is rateLookahead + extra (stretch).
	extra     time.Duration
	extraAt   time.Time // when extra last changed
	askedLast bool      // after the last room call records were asked for and not started
}

// newRateLimiter returns the worker's limiter, or nil when it has no
// rate limit.
func (w *Worker) newRateLimiter() *rateLimiter {
	if len(w.cfg.rates) == 0 {
		return nil
	}
	r := &rateLimiter{base: w.cfg.rates[0]} // checkRates allows one, on the worker's only topic
	r.use(r.base)
	return r
}

// use puts rate in force.
func (r *rateLimiter) use(rate topicRate) {
	r.rate, r.limit, r.slot = rate, rate.perSecond(), float64(rate.per)/float64(rate.n)
	r.shown.Store(&rate)
}

// A rateSwitch is a rate set at run time (package control) and the time
// it takes effect, the same on every worker of the group.
type rateSwitch struct {
	rate topicRate
	at   time.Time
}

// retune has rate take effect at at (at once if at is past): the grid of
// slots changes on every worker at that moment. The tokens of the old
// rate are dropped then, so that no second holds the old rate's burst
// and the new rate's slots.
func (r *rateLimiter) retune(rate topicRate, at, now time.Time) {
	if !r.changes(rate) {
		return
	}
	r.next = &rateSwitch{rate: rate, at: at}
	r.armAt(now, at)
}

// changes reports whether rate is not the one in force or coming.
func (r *rateLimiter) changes(rate topicRate) bool {
	if r.next != nil {
		return r.next.rate != rate
	}
	return r.rate != rate
}

// switchDue puts a rate set at run time in force when its time has come.
func (r *rateLimiter) switchDue(now time.Time) {
	if r.next == nil || now.Before(r.next.at) {
		return
	}
	r.use(r.next.rate)
	r.next, r.plan, r.cur, r.held = nil, nil, false, 0
}

// current is this worker's share at now, or nil while it waits to be
// counted or when its last count is stale.
func (r *rateLimiter) current(now time.Time) *rateShare {
	s := r.share.Load()
	if s == nil || s.members == 0 || !now.Before(s.until) {
		return nil
	}
	return s
}

// slotAt is the slot of time t.
func (r *rateLimiter) slotAt(t time.Time) int64 {
	return int64(math.Floor(float64(t.UnixNano()) / r.slot))
}

// slotTime is when slot j begins.
func (r *rateLimiter) slotTime(j int64) time.Time {
	return time.Unix(0, int64(math.Ceil(float64(j)*r.slot)))
}

// burst is how many tokens of past slots a worker keeps: the fleet's
// together at most a tenth of a second of the limit less one job, so that
// no second holds more than 1.1 × the limit; none below 20 jobs a second.
func (r *rateLimiter) burst(s *rateShare) int {
	k := max(s.members, s.prevMembers)
	return max(0, int(math.Floor(r.limit*rateBurst.Seconds()))-1) / k
}

// refill counts the slots up to now's and returns the share and now's
// slot.
func (r *rateLimiter) refill(now time.Time) (*rateShare, int64) {
	r.switchDue(now)
	s, j := r.current(now), r.slotAt(now)
	switch {
	case s == nil:
		r.plan, r.cur, r.held = nil, false, 0
		return nil, j
	case !s.sameSlots(r.plan): // a new count: the current slot may be another's under it
		r.plan, r.lastSlot, r.cur, r.held = s, j, false, min(r.held, r.burst(s))
		return s, j
	case j == r.lastSlot:
		return s, j
	}
	b := r.burst(s)
	if r.askedLast && r.missedSince(s, j) {
		r.stretch(now)
	}
	if r.cur {
		r.held++
	}
	if n := j - r.lastSlot - 1; n > 0 && r.held < b {
		if n > int64(s.members*max(1, s.prevMembers)*(b+1)) {
			r.held = b
		} else {
			for i := r.lastSlot + 1; i < j; i++ {
				if s.owns(i) {
					r.held++
				}
			}
		}
	}
	r.held = min(r.held, b)
	r.lastSlot, r.cur = j, s.owns(j)
	return s, j
}

// take spends a token for a job that starts now, if there is one; if
// not, the limiter's timer fires at the worker's next slot. A nil
// limiter always allows.
func (r *rateLimiter) take(now time.Time) bool {
	if r == nil {
		return true
	}
	s, j := r.refill(now)
	switch {
	case r.cur:
		r.cur = false
		return true
	case r.held > 0:
		r.held--
		return true
	}
	r.armAt(now, r.nextSlot(s, j, 0))
	return false
}

// room returns how many of want more records the worker may ask for,
// with inHand records already fetched or asked for and not started: as
// many as its tokens and its slots of the lookahead (rateLookahead, more
// after late fetches: stretch) will start.
// When that is fewer than want, the limiter's timer fires at its next
// slot. A nil limiter allows want.
func (r *rateLimiter) room(now time.Time, want, inHand int) int {
	if r == nil {
		return want
	}
	s, j := r.refill(now)
	free := r.held - inHand
	if r.cur {
		free++
	}
	lookahead := r.lookahead(now)
	ahead := r.slotAt(now.Add(lookahead))
	if s != nil {
		for i := j + 1; i <= ahead && free < want; i++ {
			if s.owns(i) {
				free++
			}
		}
	}
	if free < want { // wake when the next slot of its own comes within the lookahead
		r.armAt(now, r.nextSlot(s, ahead, lookahead))
	}
	n := max(0, min(want, free))
	r.askedLast = inHand+n > 0
	return n
}

// stretch lengthens the lookahead after one of the worker's slots passed
// unused while records it had asked for had not come: their fetch took
// longer than the lookahead. With few slots per worker and no token kept
// (burst is 0 below 20 jobs a second) each late fetch costs a slot: on
// the 3-node cluster, 10 jobs a second on 3 workers ran 0.80× the limit
// with 100 ms and 1.00× with 1 s. The lookahead doubles what it adds (at
// least rateLookahead) up to rateLookaheadMax; a record that comes early
// only waits in the queue, its lock renewed (keepQueuedLocks). Only the
// records asked for ahead grow, never the tokens: the limit holds.
func (r *rateLimiter) stretch(now time.Time) {
	r.extra = min(max(2*r.extra, rateLookahead), rateLookaheadMax-rateLookahead)
	r.extraAt = now
}

// missedSince reports whether a slot of the worker's from lastSlot to
// before j passed with its token unused.
func (r *rateLimiter) missedSince(s *rateShare, j int64) bool {
	if r.cur {
		return true
	}
	if j-r.lastSlot-1 >= int64(s.members*max(1, s.prevMembers)) {
		return true // a whole period of slots passed: one was its own
	}
	for i := r.lastSlot + 1; i < j; i++ {
		if s.owns(i) {
			return true
		}
	}
	return false
}

// lookahead is how far ahead of its slots the worker asks for records
// at now: rateLookahead, and what stretch added, halved for every
// rateLookaheadEase without a late fetch.
func (r *rateLimiter) lookahead(now time.Time) time.Duration {
	for r.extra > 0 && now.Sub(r.extraAt) >= rateLookaheadEase {
		r.extra /= 2
		if r.extra < rateLookahead/2 {
			r.extra = 0
		}
		r.extraAt = r.extraAt.Add(rateLookaheadEase)
	}
	return rateLookahead + r.extra
}

// nextSlot is when to wake for the worker's first slot after j: lead
// before it begins (or, with no share, when to look at it again).
func (r *rateLimiter) nextSlot(s *rateShare, j int64, lead time.Duration) time.Time {
	if s != nil {
		if next, ok := s.nextOwned(j); ok {
			return r.slotTime(next).Add(-lead)
		}
	}
	return time.Now().Add(rateSharePoll)
}

// armAt has the timer fire at at, unless it fires earlier already.
func (r *rateLimiter) armAt(now, at time.Time) {
	if r.armedAt.After(now) && !at.Before(r.armedAt) {
		return
	}
	d := max(at.Sub(now), time.Microsecond)
	r.armedAt = now.Add(d)
	if r.timer == nil {
		r.timer = time.NewTimer(d)
		return
	}
	r.timer.Reset(d)
}

// wake is the channel on which the limiter's timer fires; nil (never)
// without a limit or a timer.
func (r *rateLimiter) wake() <-chan time.Time {
	if r == nil || r.timer == nil {
		return nil
	}
	return r.timer.C
}

// stop stops the timer; the executor calls it when it returns.
func (r *rateLimiter) stop() {
	if r != nil && r.timer != nil {
		r.timer.Stop()
	}
}

// stats returns the limit and this worker's share, per second, for
// MemberStats; zeros without a limit.
func (r *rateLimiter) stats() (topic string, limit, share float64) {
	if r == nil {
		return "", 0, 0
	}
	rate := r.shown.Load()
	limit = rate.perSecond()
	if s := r.current(time.Now()); s != nil {
		share = s.perSecond * limit / r.base.perSecond() // the planner counts in the code's rate
	}
	return rate.topic, limit, share
}

// logArgs are the limit's fields of the worker's start line.
func (r *rateLimiter) logArgs() []any {
	if r == nil {
		return nil
	}
	return []any{"rate_limit", r.shown.Load().String(), "rate_topic", r.base.topic}
}

// watchRate counts, every refresh until ctx is done, the members that
// share the worker's rate limit, and publishes the worker's share.
func (w *Worker) watchRate(ctx context.Context, cl *kgo.Client, r *rateLimiter, memberID string, log *slog.Logger) {
	every := w.cfg.rateRefresh
	c := rateCount{adm: kadm.NewClient(cl), group: w.cfg.group, topic: r.base.topic, self: memberID}
	p := ratePlanner{every: every, limit: r.base.perSecond()}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last *rateShare
	failing := false
	for {
		sent := time.Now()
		ids, err := c.members(ctx, every/2)
		if err != nil {
			if !failing && ctx.Err() == nil {
				log.Warn("cannot count the workers that share the rate limit; this worker starts no jobs of the topic until it can",
					"topic", r.base.topic, "error", err)
			}
			failing = true // the share runs out at its until: the others may not see joins
		} else {
			failing = false
			next := p.plan(sent, time.Now(), ids, memberID)
			r.share.Store(next)
			if last == nil || next.members != last.members || next.perSecond != last.perSecond {
				log.Info("rate limit share", "topic", r.base.topic, "rate_limit", r.shown.Load().String(),
					"workers", len(ids), "share_per_second", round2(next.perSecond*r.shown.Load().perSecond()/r.base.perSecond()), "counted", slices.Contains(ids, memberID))
			}
			last = next
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ratePlanner turns the counts of watchRate into shares. Its rules keep
// the slots of any two workers apart whatever counts they have seen:
//
//   - a worker takes no slot until it has been counted for 2 refreshes,
//     nor once its last count was sent 1.75 refreshes ago (a share holds
//     that long), so every worker taking slots has seen it;
//   - when the count changes, it takes for 1.75 refreshes only the slots
//     it owns under both counts, so it shares none with a worker still on
//     the old one or already on the new one;
//   - a second change within that time leaves it no slot until 1.75
//     refreshes after it.
type ratePlanner struct {
	every time.Duration
	limit float64

	seenAt    time.Time // when this worker was first counted (zero: not counted)
	lastSent  time.Time // when the last count that answered was sent
	view      rateView  // the latest count
	changeEnd time.Time // the change under way ends then
	prev      rateView  // the count before it
	blackout  time.Time // no slot until then
}

// rateView is one count: this worker is index of members.
type rateView struct{ members, index int }

// plan is the share for the members ids (sorted) that a describe sent
// at sent found, at now.
func (p *ratePlanner) plan(sent, now time.Time, ids []string, self string) *rateShare {
	holds := sent.Add(p.every * 7 / 4)
	stale := !p.lastSent.IsZero() && sent.Sub(p.lastSent) >= p.every*7/4
	p.lastSent = sent
	index := slices.Index(ids, self)
	if index < 0 || stale {
		p.seenAt = time.Time{}
		return &rateShare{until: holds}
	}
	view := rateView{len(ids), index}
	switch {
	case p.seenAt.IsZero():
		p.seenAt, p.view, p.changeEnd, p.blackout = now, view, time.Time{}, time.Time{}
	case view == p.view:
	case now.Before(p.changeEnd):
		p.view, p.changeEnd, p.blackout = view, time.Time{}, now.Add(p.every*7/4)
	default:
		p.prev, p.view, p.changeEnd = p.view, view, now.Add(p.every*7/4)
	}
	if now.Sub(p.seenAt) < 2*p.every || now.Before(p.blackout) {
		return &rateShare{until: holds}
	}
	s := &rateShare{members: view.members, index: view.index, until: holds}
	if now.Before(p.changeEnd) {
		s.prevMembers, s.prevIndex = p.prev.members, p.prev.index
	}
	period := view.members * max(1, s.prevMembers)
	owned := 0
	for j := range period {
		if s.owns(int64(j)) {
			owned++
		}
	}
	if owned == 0 {
		return &rateShare{until: holds}
	}
	s.perSecond = p.limit * float64(owned) / float64(period)
	return s
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// rateCount counts the group's members that share a topic's limit.
type rateCount struct {
	adm          *kadm.Client
	group, topic string
	self         string // this worker's member ID
}

// members describes the group within timeout and returns the IDs of the
// members that subscribe to the topic, sorted. Subscriptions, not
// assignments: a member's subscription is there from its first heartbeat
// and stays while partitions move between members (Kafka 4.4.0 showed a
// member with no assignment for a moment when another joined).
func (c rateCount) members(ctx context.Context, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	described, err := c.adm.DescribeShareGroups(ctx, c.group)
	if err != nil {
		return nil, err
	}
	g, ok := described[c.group]
	if !ok {
		return nil, fmt.Errorf("describe share group %s: no answer", c.group)
	}
	if g.Err != nil {
		return nil, g.Err
	}
	var ids []string
	for _, m := range g.Members {
		if slices.Contains(m.SubscribedTopicNames, c.topic) {
			ids = append(ids, m.MemberID)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// topicsOf is the topics of routes, in order.
func topicsOf(routes []route) []string {
	ts := make([]string, len(routes))
	for i, r := range routes {
		ts[i] = r.topic
	}
	return ts
}
