package main

import (
	"testing"
	"time"
)

// busiestSecond finds the densest second of sorted start times, and where
// it begins.
func TestBusiestSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		starts []time.Time
		most   int
		from   time.Time
	}{
		{nil, 0, time.Time{}},
		{at(0), 1, t0},
		{at(0, 999, 1000), 2, t0}, // 1000 is a second after 0: not in its second
		{at(0, 500, 1200, 1300, 1400), 4, t0.Add(500 * time.Millisecond)}, // 500..1400
		{at(0, 100, 200, 2000, 2100), 3, t0},
	} {
		most, from := busiestSecond(c.starts)
		if most != c.most || !from.Equal(c.from) {
			t.Errorf("busiestSecond(%v) = %d from %v, want %d from %v", c.starts, most, from, c.most, c.from)
		}
	}
}
