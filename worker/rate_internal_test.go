package worker

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

// limiterAt returns a limiter of limit jobs a second on which this
// worker is index of members, until far in the future.
func limiterAt(limit, members, index int) *rateLimiter {
	r := &rateLimiter{base: topicRate{"t", limit, time.Second}}
	r.use(r.base)
	r.share.Store(&rateShare{members: members, index: index, perSecond: float64(limit) / float64(members), until: time.Now().Add(time.Hour)})
	return r
}

// startsOver has each limiter start every job it allows, all asking every
// step, from t0 for d, and returns the start times, sorted.
func startsOver(rs []*rateLimiter, t0 time.Time, d, step time.Duration) []time.Time {
	var at []time.Time
	for now := t0; now.Before(t0.Add(d)); now = now.Add(step) {
		for _, r := range rs {
			for r.take(now) {
				at = append(at, now)
			}
		}
	}
	for _, r := range rs {
		r.stop()
	}
	return at
}

// maxInWindow is the most of the sorted times at within any window of
// length w.
func maxInWindow(at []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// Under a backlog a fleet of 1, 3 or 10 workers starts the limit each
// second, and no second holds more than the limit and one job: the
// workers own distinct slots of one grid.
func TestRateLimiterFleetStartsTheLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 3, 10, 14, 100, 1000} {
		for _, k := range []int{1, 3, 10} {
			rs := make([]*rateLimiter, k)
			for i := range rs {
				rs[i] = limiterAt(limit, k, i)
			}
			at := startsOver(rs, time.Now(), 10*time.Second, 700*time.Microsecond)
			if got, want := len(at), 10*limit; got < want-1 || got > want+1 {
				t.Errorf("%d/s on %d workers: %d starts in 10 s, want %d ± 1", limit, k, got, want)
			}
			if got := maxInWindow(at, time.Second); got > limit+1 {
				t.Errorf("%d/s on %d workers: %d starts in a 1 s window, want at most %d", limit, k, got, limit+1)
			}
		}
	}
}

// After an idle spell a worker starts at once its slot's job and the
// tokens it kept: the fleet's together at most a tenth of a second of the
// limit less one job, none below 20 jobs a second.
func TestRateLimiterBurstAfterIdle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, members, want int }{
		{10, 1, 1}, {19, 1, 1}, {20, 1, 2}, {100, 1, 10}, {100, 3, 4}, {1000, 3, 34},
	} {
		r := limiterAt(tc.limit, tc.members, 0)
		t0 := time.Now()
		r.take(t0) // starts the count
		now := t0.Add(time.Minute)
		for !r.share.Load().owns(r.slotAt(now)) {
			now = now.Add(time.Duration(r.slot))
		}
		n := 0
		for r.take(now) {
			n++
		}
		r.stop()
		if n != tc.want {
			t.Errorf("%d/s on %d workers: %d starts at once after a minute idle, want %d", tc.limit, tc.members, n, tc.want)
		}
	}
}

// A worker asks for records only as its tokens and its slots within the
// lookahead will start, counting those it has asked for and not started.
func TestRateLimiterRoom(t *testing.T) {
	t.Parallel()
	r := limiterAt(100, 1, 0) // a burst of 9, the slot's token, 10 slots ahead
	t0 := time.Now()
	r.take(t0)
	now := t0.Add(time.Second)
	if got := r.room(now, 500, 0); got != 20 {
		t.Errorf("room after idle: %d, want 20 (9 kept + the slot's + 10 ahead)", got)
	}
	if got := r.room(now, 500, 15); got != 5 {
		t.Errorf("room with 15 in hand: %d, want 5", got)
	}
	if got := r.room(now, 3, 0); got != 3 {
		t.Errorf("room for 3: %d, want 3", got)
	}
	if got := r.room(now, 500, 30); got != 0 {
		t.Errorf("room with 30 in hand: %d, want 0", got)
	}
	if r.wake() == nil {
		t.Errorf("no timer armed while records wait for slots")
	}
	r.stop()
}

// A slot that passes unused while records the worker asked for have not
// come (their fetch took longer than the lookahead) stretches the
// lookahead, doubling up to 1 s; it eases back by half every 30 s
// without another. Only the records asked for ahead grow: the starts
// stay within the limit.
func TestRateLimiterLookaheadStretchesAfterLateFetches(t *testing.T) {
	t.Parallel()
	r := limiterAt(10, 3, 0)             // slots of 100 ms, every third this worker's, no token kept
	t0 := time.Unix(0, 0).Add(time.Hour) // at the start of a slot of index 0 (36000 mod 3 = 0)
	if got := r.room(t0.Add(-100*time.Millisecond), 100, 0); got != 1 {
		t.Fatalf("room 100 ms before its slot: %d, want 1 (that slot; the next is 400 ms away)", got)
	}
	// Asked for 1; its slot passes without the record.
	now := t0.Add(150 * time.Millisecond)
	if got := r.room(now, 100, 1); got != 0 {
		t.Fatalf("room after a late fetch: %d, want 0 (200 ms ahead: none of its slots)", got)
	}
	if got := r.lookahead(now); got != 200*time.Millisecond {
		t.Fatalf("lookahead after one late fetch: %v, want 200ms", got)
	}
	// More late slots: 300, 500, 900 ms ahead; never more than 1 s.
	for i, want := range []time.Duration{300, 500, 900, 1000, 1000} {
		now = t0.Add(time.Duration(300*(i+1)+150) * time.Millisecond) // past each next slot of its own
		r.room(now, 100, 1)
		if got := r.lookahead(now); got != want*time.Millisecond {
			t.Fatalf("lookahead after %d late fetches: %v, want %vms", i+2, got, want)
		}
	}
	// 1 s ahead: this worker's slots in it, 3 or 4.
	if got := r.room(now, 100, 0); got < 3 || got > 4 {
		t.Errorf("room with a lookahead of 1 s: %d, want 3 or 4", got)
	}
	// Starts: one per slot of its own, whatever the lookahead.
	started := 0
	for at := now; at.Before(now.Add(3 * time.Second)); at = at.Add(10 * time.Millisecond) {
		for r.take(at) {
			started++
		}
	}
	if started != 10 {
		t.Errorf("starts in 3 s with the lookahead stretched: %d, want 10 (its slots)", started)
	}
	// Eased back: halved every 30 s without a late fetch.
	if got := r.lookahead(now.Add(31 * time.Second)); got != 550*time.Millisecond {
		t.Errorf("lookahead 30 s on: %v, want 550ms", got)
	}
	if got := r.lookahead(now.Add(5 * time.Minute)); got != rateLookahead {
		t.Errorf("lookahead 5 min on: %v, want %v", got, rateLookahead)
	}
	r.stop()
}

// A worker with no share (not counted yet, or its count stale) fetches
// and starts nothing.
func TestRateLimiterWithoutAShare(t *testing.T) {
	t.Parallel()
	r := &rateLimiter{rate: topicRate{"t", 10, time.Second}, limit: 10, slot: float64(time.Second) / 10}
	now := time.Now()
	if r.take(now) || r.room(now, 10, 0) != 0 {
		t.Errorf("a worker not counted yet may start or fetch")
	}
	r.share.Store(&rateShare{members: 1, perSecond: 10, until: now.Add(time.Second)})
	later := now.Add(2 * time.Second)
	if r.take(later) || r.room(later, 10, 0) != 0 {
		t.Errorf("a worker whose count is stale may start or fetch")
	}
	r.stop()
	var none *rateLimiter
	if !none.take(now) || none.room(now, 7, 100) != 7 || none.wake() != nil {
		t.Errorf("no limit limits")
	}
}

// While the members change, two workers never own one slot, whichever
// count each has seen, as long as none is on the old count while another
// is on the new one (the planner's rules see to that).
func TestRateSharesNeverOverlapDuringAChange(t *testing.T) {
	t.Parallel()
	// Members a, b; then c joins between them (a, c, b); then b leaves (a, c).
	counts := [][]string{{"a", "b"}, {"a", "b", "c"}, {"a", "c"}, {"a"}, {"a", "b", "c", "d"}}
	for step := 1; step < len(counts); step++ {
		before, after := counts[step-1], counts[step]
		// Each worker counted in the new count is on the old count, in
		// the change, or on the new count.
		shares := func(id string) map[string]*rateShare {
			out := map[string]*rateShare{}
			o, n := slices.Index(before, id), slices.Index(after, id)
			if o >= 0 {
				out["old"] = &rateShare{members: len(before), index: o}
			}
			if n >= 0 {
				out["new"] = &rateShare{members: len(after), index: n}
				if o >= 0 {
					out["change"] = &rateShare{members: len(after), index: n, prevMembers: len(before), prevIndex: o}
				}
			}
			return out
		}
		ids := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(before), after...))))
		for _, x := range ids {
			for _, y := range ids {
				if x >= y {
					continue
				}
				for xs, sx := range shares(x) {
					for ys, sy := range shares(y) {
						if xs == "old" && ys == "new" || xs == "new" && ys == "old" {
							continue // the rules keep these apart in time
						}
						for j := range int64(120) {
							if sx.owns(j) && sy.owns(j) {
								t.Fatalf("%v to %v: %s (%s) and %s (%s) both own slot %d", before, after, x, xs, y, ys, j)
							}
						}
					}
				}
			}
		}
	}
}

// The planner: a worker takes no slot until counted for 2 refreshes; a
// change of count is a change for 1.75 refreshes; a second change
// within it is a blackout; a count after a gap is a new join.
func TestRatePlanner(t *testing.T) {
	t.Parallel()
	const every = time.Second
	p := ratePlanner{every: every, limit: 12}
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	plan := func(d time.Duration, ids ...string) *rateShare { return p.plan(at(d), at(d), ids, "b") }

	if s := plan(0, "a"); s.members != 0 {
		t.Fatalf("not counted: %+v, want no share", s)
	}
	if s := plan(every, "a", "b"); s.members != 0 {
		t.Fatalf("just counted: %+v, want no share", s)
	}
	if s := plan(2*every, "a", "b"); s.members != 0 {
		t.Fatalf("counted 1 refresh ago: %+v, want no share", s)
	}
	s := plan(3*every, "a", "b")
	if s.members != 2 || s.index != 1 || s.prevMembers != 0 || s.perSecond != 6 {
		t.Fatalf("counted 2 refreshes ago: %+v, want 1 of 2 at 6/s", s)
	}
	s = plan(4*every, "a", "b", "c")
	if s.members != 3 || s.index != 1 || s.prevMembers != 2 || s.prevIndex != 1 || s.perSecond != 2 {
		t.Fatalf("a change: %+v, want 1 of 3 and 1 of 2 at 2/s", s)
	}
	if s = plan(5*every, "a", "b", "c", "d"); s.members != 0 {
		t.Fatalf("a second change within the first: %+v, want no share", s)
	}
	if s = plan(6*every, "a", "b", "c", "d"); s.members != 0 {
		t.Fatalf("within the blackout: %+v, want no share", s)
	}
	s = plan(7*every, "a", "b", "c", "d")
	if s.members != 4 || s.prevMembers != 0 || s.perSecond != 3 {
		t.Fatalf("after the blackout: %+v, want 1 of 4 at 3/s", s)
	}
	if s = plan(9*every, "a", "b", "c", "d"); s.members != 0 {
		t.Fatalf("a count after a gap of 2 refreshes: %+v, want no share (a new join)", s)
	}
}

// TopicRate is validated in New, each error saying what to do.
func TestTopicRateOptions(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	for _, tc := range []struct {
		name string
		opts []Option
		want string // "" : valid
	}{
		{"valid", []Option{TopicRate("emails", 14, time.Second)}, ""},
		{"per minute", []Option{TopicRate("emails", 600, time.Minute)}, ""},
		{"no handler", []Option{TopicRate("sms", 14, time.Second)}, `TopicRate("sms", 14, 1s): no handler for the topic; register it with worker.Handle first`},
		{"twice", []Option{TopicRate("emails", 14, time.Second), TopicRate("emails", 10, time.Second)}, "the topic's rate is set twice"},
		{"zero", []Option{TopicRate("emails", 0, time.Second)}, "n must be at least 1"},
		{"no interval", []Option{TopicRate("emails", 14, 0)}, "the interval must be positive"},
		{"too fast", []Option{TopicRate("emails", 1, time.Nanosecond)}, "no limit; raise the interval or drop the limit"},
		{"beside another topic", []Option{Handle("sms", nop), TopicRate("emails", 14, time.Second)}, `the worker also handles ["sms"]; a rate-limited topic needs a Worker of its own`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := append([]Option{Brokers("127.0.0.1:9092"), Group("g"), Handle("emails", nop)}, tc.opts...)
			_, err := New(opts...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A count that changes nothing (a new describe, the same members) keeps
// the slot under way: its job still starts.
func TestRateLimiterKeepsItsSlotAcrossRecounts(t *testing.T) {
	t.Parallel()
	r := limiterAt(10, 1, 0)
	now := time.Now()
	r.room(now, 1, 0) // counts from now's slot
	next := r.slotTime(r.slotAt(now) + 1).Add(time.Millisecond)
	r.share.Store(&rateShare{members: 1, index: 0, perSecond: 10, until: now.Add(time.Hour)})
	if !r.take(next) {
		t.Errorf("a recount with the same members took the slot under way")
	}
	r.stop()
}

// A rate set at run time takes effect on every worker of the fleet at the
// moment it names, whenever each worker hears of it: the fleet starts the
// old rate before it and the new one after it, and no second across the
// switch holds more than the larger rate's bound.
func TestRateLimiterRetuneSwitchesTheFleetAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to int }{{10, 40}, {40, 10}, {14, 100}} {
		const k = 3
		rs := make([]*rateLimiter, k)
		for i := range rs {
			rs[i] = limiterAt(tc.from, k, i)
		}
		t0 := time.Unix(1_000_000, 0)
		switchAt := t0.Add(2 * time.Second)
		var at []time.Time
		for now := t0; now.Before(t0.Add(4 * time.Second)); now = now.Add(time.Millisecond) {
			for i, r := range rs {
				// Worker i hears of the new rate 100 ms + i × 30 ms
				// before it takes effect.
				if now.Equal(switchAt.Add(-100*time.Millisecond + time.Duration(i)*30*time.Millisecond)) {
					r.retune(topicRate{"t", tc.to, time.Second}, switchAt, now)
				}
				for r.take(now) {
					at = append(at, now)
				}
			}
		}
		for _, r := range rs {
			r.stop()
		}
		before := len(slices.DeleteFunc(slices.Clone(at), func(a time.Time) bool { return !a.Before(switchAt) }))
		after := len(at) - before
		if want := 2 * tc.from; before < want-1 || before > want+want/10+1 {
			t.Errorf("%d → %d/s: %d starts in the 2 s before the switch; want about %d", tc.from, tc.to, before, want)
		}
		if want := 2 * tc.to; after < want-1 || after > want+want/10+1 {
			t.Errorf("%d → %d/s: %d starts in the 2 s after the switch; want about %d", tc.from, tc.to, after, want)
		}
		bound := max(tc.from, tc.to)
		if most := maxInWindow(at, time.Second); most > bound+bound/10+1 {
			t.Errorf("%d → %d/s: %d starts in one second; want at most %d", tc.from, tc.to, most, bound+bound/10+1)
		}
		if rs[0].shown.Load().n != tc.to {
			t.Errorf("%d → %d/s: the rate shown is %v", tc.from, tc.to, rs[0].shown.Load())
		}
	}
}
