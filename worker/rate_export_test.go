package worker

import "time"

// RateRefresh sets how often a rate-limited worker counts the members
// sharing its limit (rate.go) for a test; a member takes its share 2
// refreshes after it is first counted.
func RateRefresh(d time.Duration) Option {
	return optionFunc(func(c *config) { c.rateRefresh = d })
}
