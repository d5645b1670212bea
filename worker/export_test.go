package worker

import (
	"context"
	"time"

	"github.com/shareq/shareq/control"
)

// StallCheckTimes shortens the stall check's times (stall.go) for a test:
// a partition that gives nothing for after is looked at, every every.
func StallCheckTimes(after, every time.Duration) Option {
	return optionFunc(func(c *config) { c.stallAfter, c.stallEvery = after, every })
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
