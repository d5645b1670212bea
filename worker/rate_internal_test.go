package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

// limiterAt returns a limiter whose share is share jobs a second until
// far in the future.
func limiterAt(share float64) *rateLimiter {
	r := &rateLimiter{rate: topicRate{"t", 1, time.Second}, limit: share}
	r.share.Store(&rateShare{perSecond: share, members: 1, until: time.Now().Add(time.Hour)})
	return r
}

// startsOver has r start every job it allows, asking every step, from t0
// for d, and returns the start times.
func startsOver(r *rateLimiter, t0 time.Time, d, step time.Duration) []time.Time {
	var at []time.Time
	for now := t0; now.Before(t0.Add(d)); now = now.Add(step) {
		for r.take(now) {
			at = append(at, now)
		}
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

// Under a backlog a worker starts its share each second, give or take
// one job, and never more than its share plus its burst in any second.
func TestRateLimiterStartsItsShare(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{1, 3.5, 14, 100, 1000} {
		r := limiterAt(share)
		t0 := time.Now()
		at := startsOver(r, t0, 10*time.Second, time.Millisecond)
		r.stop()
		if got, want := float64(len(at)), share*10; got < want-1 || got > want+burstOf(share) {
			t.Errorf("share %v/s: %v starts in 10 s, want %v (+ a burst of %v at most)", share, got, want, burstOf(share))
		}
		if got, most := maxInWindow(at, time.Second), int(share+burstOf(share)); got > most {
			t.Errorf("share %v/s: %d starts in a 1 s window, want at most %d", share, got, most)
		}
	}
}

// After an idle spell a worker starts at most its burst at once: a tenth
// of a second of its share, or one job.
func TestRateLimiterBurstAfterIdle(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{2, 50, 400} {
		r := limiterAt(share)
		t0 := time.Now()
		r.take(t0) // starts the clock
		now := t0.Add(time.Minute)
		n := 0
		for r.take(now) {
			n++
		}
		if want := int(burstOf(share)); n != want {
			t.Errorf("share %v/s: %d starts at once after a minute idle, want %d", share, n, want)
		}
	}
}

// A worker asks for records only as its tokens will allow within the
// lookahead, counting those it has asked for and not started.
func TestRateLimiterRoom(t *testing.T) {
	t.Parallel()
	r := limiterAt(100) // burst 10, lookahead 10
	t0 := time.Now()
	r.take(t0)
	now := t0.Add(time.Second) // full: 10 tokens
	if got := r.room(now, 500, 0); got != 20 {
		t.Errorf("room with a full bucket: %d, want 20 (10 tokens + 10 in the lookahead)", got)
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
		t.Errorf("no timer armed while records wait for tokens")
	}
	r.stop()
}

// A worker with no share (not counted yet, or its count stale) fetches
// and starts nothing.
func TestRateLimiterWithoutAShare(t *testing.T) {
	t.Parallel()
	r := &rateLimiter{rate: topicRate{"t", 10, time.Second}, limit: 10}
	now := time.Now()
	if r.take(now) || r.room(now, 10, 0) != 0 {
		t.Errorf("a worker not counted yet may start or fetch")
	}
	r.share.Store(&rateShare{perSecond: 10, members: 1, until: now.Add(time.Second)})
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
