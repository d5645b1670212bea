package worker

import "time"

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
