package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/internal/member"
)

// topicPauses is a PausedTopicObserver that keeps what it is told.
type topicPauses struct {
	NopObserver
	mu     sync.Mutex
	events []string
}

func (p *topicPauses) TopicPaused(topic, reason, by string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf("paused %s by %s: %s", topic, by, reason))
}

func (p *topicPauses) TopicResumed(topic string, paused time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf("resumed %s after %v", topic, paused))
}

func (p *topicPauses) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// pausable is an executor with its pauses fed by the test, and the copies
// it writes kept (a produce that succeeds).
type pausable struct {
	*xbundle
	controls chan control.State

	mu     sync.Mutex
	copies []*kgo.Record
	paused []TopicPause // what TopicsPaused published last
}

func startPausable(t *testing.T, h *ctl, opts ...Option) *pausable {
	t.Helper()
	p := &pausable{controls: make(chan control.State)}
	p.xbundle = startExecutorWith(t, h, nil, func(c *executorConfig) {
		c.Controls = p.controls
		c.TopicsPaused = func(ps []TopicPause) {
			p.mu.Lock()
			p.paused = ps
			p.mu.Unlock()
		}
		c.Produce = func(_ context.Context, rec *kgo.Record, done func(*kgo.Record, error)) {
			p.mu.Lock()
			p.copies = append(p.copies, rec)
			p.mu.Unlock()
			done(rec, nil)
		}
	}, opts...)
	return p
}

// set applies the pauses ps (topic → reason) of group "g" and lets the
// executor settle.
func (p *pausable) set(ps map[string]string) {
	var st control.State
	for t, reason := range ps {
		st.Pauses = append(st.Pauses, control.Pause{Group: "g", Topic: t, Reason: reason, By: "ops"})
	}
	p.controls <- st
	synctest.Wait()
}

// copied returns the keys of the copies written.
func (p *pausable) copied() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ks []string
	for _, r := range p.copies {
		ks = append(ks, string(r.Key))
	}
	return ks
}

// keepRenewing answers the renewals asked for while d passes.
func (p *pausable) keepRenewing(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(min(time.Second, time.Until(end)))
		synctest.Wait()
		p.f.answerRenewals(lock, nil)
	}
}

// A paused topic's queued jobs and the ones fetched after the pause wait:
// not started, their locks renewed, nothing acknowledged (no delivery
// spent); the running job finishes. On resume they start first, in order,
// on their first delivery.
func TestTopicPauseHoldsJobsInHandAndResumesThemInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		var logs logbuf.Buffer
		obs := &topicPauses{}
		p := startPausable(t, h, Concurrency(1), MaxHold(time.Hour), Observers(obs),
			Logger(slog.New(slog.NewTextHandler(&logs, nil))))
		p.f.deliver(delivery(1, 1, lock), delivery(2, 1, lock), delivery(3, 1, lock))
		p.set(map[string]string{"t": "bad deploy", "other": "not this worker's"})

		if got := p.f.callList(); !slices.Contains(got, "pause [t]") {
			t.Fatalf("member calls %v, want pause [t]", got)
		}
		if got := p.paused; len(got) != 1 || got[0].Topic != "t" || got[0].Reason != "bad deploy" || got[0].By != "ops" {
			t.Fatalf("TopicsPaused published %+v", got)
		}
		if got := logs.String(); countLines(got, "INFO", "topic paused by ops: bad deploy") != 1 {
			t.Fatalf("logs:\n%s\nwant one Info line for the pause", got)
		}
		h.finish(1, nil) // running: finishes as usual
		wantAcks(t, p.f, 1, member.Accept)
		p.f.deliver(delivery(4, 1, lock)) // a fetch in flight at the pause
		p.keepRenewing(2 * lock)
		if got := h.startedList(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("started %v while paused, want [1]", got)
		}
		for _, off := range []int64{2, 3, 4} {
			wantAcks(t, p.f, off)
			if !slices.Contains(p.f.renewedKeys(), key(off)) {
				t.Errorf("offset %d: lock not renewed while paused", off)
			}
		}
		time.Sleep(prefetchEvery)
		synctest.Wait()
		if got := p.x.pubHalted.Load(); got != 3 {
			t.Errorf("%d jobs counted as waiting for the pause, want 3", got)
		}

		p.f.deliver(delivery(5, 1, lock)) // none of t is fetched now; say one came late
		p.set(nil)
		if got := p.f.callList(); got[len(got)-1] != "pause []" {
			t.Fatalf("member calls %v, want pause [] last", got)
		}
		for _, off := range []int64{2, 3, 4, 5} {
			h.finish(off, nil)
		}
		if got := h.startedList(); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
			t.Fatalf("started %v, want the jobs that waited first, in order", got)
		}
		for _, off := range []int64{2, 3, 4, 5} {
			wantAcks(t, p.f, off, member.Accept)
			if got := h.countsOf(off); !slices.Equal(got, []int32{1}) {
				t.Errorf("offset %d ran on deliveries %v, want [1]", off, got)
			}
		}
		if got := obs.list(); len(got) != 2 || got[0] != "paused t by ops: bad deploy" || got[1] != "resumed t after "+(2*lock+prefetchEvery).String() {
			t.Errorf("observer heard %v", got)
		}
		if got := logs.String(); countLines(got, "INFO", "topic resumed") != 1 {
			t.Errorf("logs:\n%s\nwant one Info line for the resume", got)
		}
		p.stop(t)
	})
}

// A job that waits for its topic's pause until MaxHold is copied for
// later and accepted, as a snoozed one is: no delivery spent. A stop while
// paused copies what waits too.
func TestTopicPauseCopiesAtMaxHoldAndAtStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCtl()
		p := startPausable(t, h, Concurrency(2), MaxHold(time.Minute))
		p.set(map[string]string{"t": "maintenance"})
		p.f.deliver(delivery(1, 1, lock))
		p.keepRenewing(time.Minute + time.Second)
		if got := p.copied(); !slices.Equal(got, []string{"k1"}) {
			t.Fatalf("copies %v at MaxHold, want [1]", got)
		}
		wantAcks(t, p.f, 1, member.Accept)
		if r := p.only(t, 1); r.Outcome != OutcomeSnoozed || r.Ran {
			t.Fatalf("offset 1: %+v, want snoozed without running", r)
		}

		p.f.deliver(delivery(2, 1, lock))
		p.stop(t)
		if got := p.copied(); !slices.Equal(got, []string{"k1", "k2"}) {
			t.Fatalf("copies %v after the stop, want [1 2]", got)
		}
		wantAcks(t, p.f, 2, member.Accept)
		if got := h.startedList(); len(got) != 0 {
			t.Fatalf("started %v, want none", got)
		}
	})
}
