package worker

import (
	"context"
	"time"
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
// control topic's watcher does (a pause with Topic "" pauses every topic
// of the worker; each call replaces the pauses of the last), and returns
// once the worker applied them (PausedTopics says so).
func (w *Worker) SetPauses(ctx context.Context, ps ...TopicPause) error {
	byTopic := map[string]TopicPause{}
	for _, p := range ps {
		if p.Topic != "" {
			byTopic[p.Topic] = p
			continue
		}
		for _, t := range w.topics {
			if _, ok := byTopic[t]; !ok {
				byTopic[t] = p
			}
		}
	}
	select {
	case w.pauses <- byTopic:
	case <-ctx.Done():
		return ctx.Err()
	}
	for len(w.PausedTopics()) != len(byTopic) {
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
