package worker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
)

// StallCheckTimes shortens the stall check's times (stall.go) for a test:
// a partition that gives nothing for after is looked at, every every.
func StallCheckTimes(after, every time.Duration) Option {
	return optionFunc(func(c *config) { c.stallAfter, c.stallEvery = after, every })
}

// HealTimes shortens the stall heal's waits (heal.go) for a test: for
// the members to hold nothing, and for the start offset to move.
func HealTimes(quiet, verdict time.Duration) Option {
	return optionFunc(func(c *config) { c.healQuiet, c.healVerdict = quiet, verdict })
}

// HealStaleAfter sets how old a heal's pause must be for a worker to lift
// it as one whose healer is gone (3 minutes).
func HealStaleAfter(d time.Duration) Option {
	return optionFunc(func(c *config) { c.healStale = d })
}

// StallHealer is w's stall heal (heal.go) for a test to call, as the
// stall check calls it on a stalled partition.
type StallHealer struct{ h *healer }

// NewStallHealer returns a healer of w on a client of its own (closed
// with the test), named self in its pauses; nil when HealStalls is off.
func (w *Worker) NewStallHealer(t testing.TB, self string) *StallHealer {
	cl, err := kgo.NewClient(w.baseOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h := w.newHealer(cl, w.cfg.logger, self)
	if h == nil {
		return nil
	}
	return &StallHealer{h: h}
}

// Heal tries to heal partition of topic, found stalled at start offset
// start, and returns the result ("" when it was tried less than 10
// minutes ago), the members it poked and what the result rests on.
func (s *StallHealer) Heal(ctx context.Context, topic string, partition int32, start int64) (result string, poked int, why string) {
	s.h.last = nil
	result = s.h.heal(ctx, topicPartition{topic, partition}, start)
	if s.h.last != nil {
		poked, why = s.h.last.poked, s.h.last.why
	}
	return result, poked, why
}

// StatusRecheck shortens how often a worker whose status topic is
// missing looks for it again, for a test.
func StatusRecheck(d time.Duration) Option {
	return optionFunc(func(c *config) { c.status.recheck = d })
}

// SetPauses applies the operator's pauses to a running worker as its
// control topic's watch does (a pause with Topic "" pauses the whole
// group; each call replaces the pauses of the last), and returns once the
// worker applied them (PausedTopics says so).
func (w *Worker) SetPauses(ctx context.Context, ps ...TopicPause) error {
	var st control.State
	for _, p := range ps {
		st.Pauses = append(st.Pauses, control.Pause{Group: w.cfg.group, Topic: p.Topic, Reason: p.Reason, By: p.By})
	}
	select {
	case w.controls <- st:
	case <-ctx.Done():
		return ctx.Err()
	}
	want := len(pausesOf(st, w.cfg.group, w.handlers))
	for len(w.PausedTopics()) != want {
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WatchPauses looks at the heal pauses the worker has applied, as the
// stall check does every tick.
func (s *StallHealer) WatchPauses(ctx context.Context) { s.h.watchPauses(ctx, time.Now()) }
