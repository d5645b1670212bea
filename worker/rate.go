package worker

// A rate limit on a topic, shared by every worker of the share group
// ([TopicRate]).
//
// Where it acts. A record once fetched is acquired: its lock runs and
// releasing it spends a delivery. So the limit acts on what the worker
// asks to fetch as well as on what it starts: the executor grants the
// member credit only for the jobs the worker's tokens will let start
// within rateLookahead (topUp), and starts a queued job only with a
// token (startQueued). A record that arrives a little before its token
// (or one of the rare records a batch_optimized fetch brings past the
// credit) waits in the queue, its lock running, for at most about a
// lookahead; none waits into a spent delivery.
//
// How the fleet shares it. Each worker takes limit ÷ k, where k is the
// number of the group's members subscribed to the topic, as a
// ShareGroupDescribe every refresh (rateRefreshDefault) says. Joins: a member takes its share only once it has been in the
// describe for 2 refreshes, and a worker whose last describe was sent
// more than 1.75 refreshes ago takes none; so by the time a new member
// starts, every worker still starting jobs has described the group after
// it joined and lowered its share. Leaves: a worker that stops gracefully
// stops starting jobs before it leaves, and the others raise their share
// at their next describe. Crashes: a SIGKILLed member stays in the group
// until its session times out (SessionTimeout), and the others keep
// their smaller share meanwhile: the fleet runs below the limit, never
// above it.
//
// How exact. A token bucket per worker, at its share, holding at most
// rateBurst of it (and at least one token): in any window of length T the
// fleet starts at most limit × T plus, per worker, max(1, its share ×
// 100 ms) jobs. Under a steady backlog each worker starts a job as its
// token comes, so its 1 s windows hold its share give or take one job.

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
	// rateBurst is how much of its share a worker may start at once after
	// an idle spell (at least one job), and rateLookahead how far ahead of
	// its tokens it asks for records, so a fetch's round trip costs no
	// rate.
	rateBurst     = 100 * time.Millisecond
	rateLookahead = 100 * time.Millisecond
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
// second). A worker never fetches a record it cannot start within the
// limit, so waiting for the limit spends no delivery.
//
// The workers share the limit evenly: each takes n ÷ (the group's members
// subscribed to the topic), counted every 2 s. A worker
// that joins takes its share only once the others can have seen it (after
// about 4 s), so the fleet stays within the limit while workers join and
// leave; a worker killed without leaving stays in the group until its
// session times out ([SessionTimeout]), and the others run below the
// limit meanwhile. In any window of length T the fleet starts at most
// n × T ÷ per jobs plus, per worker, the larger of one job and a tenth of
// a second of its share. Every worker of the topic must set the same
// limit. docs/limits.md has the details and measurements.
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

// rateShare is what this worker may start, as its latest describe of the
// group said.
type rateShare struct {
	perSecond float64   // this worker's share; 0: none yet
	members   int       // the members sharing the limit (0: unknown)
	until     time.Time // the share holds until then, unless a newer describe comes first
}

// rateLimiter is one worker's token bucket for a rate-limited topic.
// watchRate publishes the worker's share; the executor's goroutine owns
// the rest.
type rateLimiter struct {
	rate  topicRate
	limit float64 // the fleet's limit, jobs per second

	share atomic.Pointer[rateShare] // written by watchRate, read by the executor and MemberStats

	// Owned by the executor's goroutine.
	tokens float64   // jobs that may start now
	last   time.Time // when tokens was brought up to date
	timer  *time.Timer
}

// newRateLimiter returns the worker's limiter, or nil when it has no
// rate limit.
func (w *Worker) newRateLimiter() *rateLimiter {
	if len(w.cfg.rates) == 0 {
		return nil
	}
	r := w.cfg.rates[0] // checkRates allows one, on the worker's only topic
	return &rateLimiter{rate: r, limit: r.perSecond()}
}

// current is this worker's share at now: 0 while it waits to be counted
// or when its last count is stale.
func (r *rateLimiter) current(now time.Time) float64 {
	s := r.share.Load()
	if s == nil || !now.Before(s.until) {
		return 0
	}
	return s.perSecond
}

// refill brings the tokens up to now at the current share and returns it.
func (r *rateLimiter) refill(now time.Time) float64 {
	share := r.current(now)
	if share == 0 {
		r.tokens, r.last = 0, now
		return 0
	}
	if !r.last.IsZero() {
		r.tokens += share * now.Sub(r.last).Seconds()
	}
	r.tokens, r.last = min(r.tokens, burstOf(share)), now
	return share
}

// burstOf is the most tokens a worker with this share holds.
func burstOf(share float64) float64 { return max(1, share*rateBurst.Seconds()) }

// take spends a token for a job that starts now, if there is one; if
// not, the limiter's timer fires when there is. A nil limiter always
// allows.
func (r *rateLimiter) take(now time.Time) bool {
	if r == nil {
		return true
	}
	share := r.refill(now)
	if r.tokens >= 1 {
		r.tokens--
		return true
	}
	r.arm(share)
	return false
}

// room returns how many of want more records the worker may ask for,
// with inHand records already fetched or asked for and not started: as
// many as its tokens will let start within rateLookahead. When that is
// fewer than want, the limiter's timer fires at the next token. A nil
// limiter allows want.
func (r *rateLimiter) room(now time.Time, want, inHand int) int {
	if r == nil {
		return want
	}
	share := r.refill(now)
	free := int(math.Floor(r.tokens+share*rateLookahead.Seconds())) - inHand
	if free < want {
		r.arm(share)
	}
	return max(0, min(want, free))
}

// arm sets the timer for the next token (or, with no share, the next
// look at it). A full bucket needs no timer: only a start or a delivery
// changes what the worker may do then, and both wake the executor.
func (r *rateLimiter) arm(share float64) {
	var d time.Duration
	switch {
	case share == 0:
		d = rateSharePoll
	case r.tokens >= burstOf(share):
		return
	default:
		d = time.Duration((math.Floor(r.tokens) + 1 - r.tokens) / share * float64(time.Second))
	}
	d = max(d, time.Millisecond)
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
	return r.rate.topic, r.limit, r.current(time.Now())
}

// logArgs are the limit's fields of the worker's start line.
func (r *rateLimiter) logArgs() []any {
	if r == nil {
		return nil
	}
	return []any{"rate_limit", r.rate.String(), "rate_topic", r.rate.topic}
}

// watchRate counts, every refresh until ctx is done, the members that
// share the worker's rate limit, and publishes the worker's share.
func (w *Worker) watchRate(ctx context.Context, cl *kgo.Client, r *rateLimiter, memberID string, log *slog.Logger) {
	every := w.cfg.rateRefresh
	c := rateCount{adm: kadm.NewClient(cl), group: w.cfg.group, topic: r.rate.topic, self: memberID}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var seenAt time.Time // when the describe first showed this member counted
	last := rateShare{members: -1}
	failing := false
	for {
		sent := time.Now()
		members, self, err := c.count(ctx, every/2)
		next := rateShare{until: sent.Add(every * 7 / 4)}
		switch {
		case err != nil:
			if !failing && ctx.Err() == nil {
				log.Warn("cannot count the workers that share the rate limit; this worker starts no jobs of the topic until it can",
					"topic", r.rate.topic, "error", err)
			}
			failing = true
			next = last // the share runs out at its until: the others may not see joins
		case !self:
			failing, seenAt = false, time.Time{}
			next.members = members
		default:
			failing = false
			if seenAt.IsZero() {
				seenAt = time.Now()
			}
			next.members = members
			if time.Since(seenAt) >= 2*every {
				next.perSecond = r.limit / float64(members)
			}
		}
		if err == nil {
			r.share.Store(&next)
			if next.members != last.members || next.perSecond != last.perSecond {
				log.Info("rate limit share", "topic", r.rate.topic, "rate_limit", r.rate.String(),
					"workers", next.members, "share_per_second", round2(next.perSecond), "counted", self)
			}
		}
		last = next
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// rateCount counts the group's members that share a topic's limit.
type rateCount struct {
	adm          *kadm.Client
	group, topic string
	self         string // this worker's member ID
}

// count describes the group within timeout and returns the members that
// subscribe to the topic, and whether this worker's member is one of
// them. Subscriptions, not assignments: a member's subscription is there
// from its first heartbeat and stays while partitions move between
// members (Kafka 4.4.0 showed a member with no assignment for a moment
// when another joined).
func (c rateCount) count(ctx context.Context, timeout time.Duration) (members int, self bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	described, err := c.adm.DescribeShareGroups(ctx, c.group)
	if err != nil {
		return 0, false, err
	}
	g, ok := described[c.group]
	if !ok {
		return 0, false, fmt.Errorf("describe share group %s: no answer", c.group)
	}
	if g.Err != nil {
		return 0, false, g.Err
	}
	for _, m := range g.Members {
		if !slices.Contains(m.SubscribedTopicNames, c.topic) {
			continue
		}
		members++
		self = self || m.MemberID == c.self
	}
	return members, self, nil
}

// topicsOf is the topics of routes, in order.
func topicsOf(routes []route) []string {
	ts := make([]string, len(routes))
	for i, r := range routes {
		ts[i] = r.topic
	}
	return ts
}
