package console

import (
	"errors"
	"testing"
	"time"
)

// fakeClock is a settable now.
type fakeClock struct{ at time.Time }

func (c *fakeClock) now() time.Time { return c.at }

func values(ps []point) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = p.V
	}
	return out
}

func equalValues(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The hour keeps every step's latest sample; the day keeps each
// minute's largest; unknown values are left out, not drawn as 0.
func TestSamplerKeepsTheHourAndTheDay(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{at: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	s := newSampler(nil, 10*time.Second, clk.now)
	for i, lag := range []int64{5, 9, 7, 3, 4, 2, -1} { // a sample every 10 s: 12:00:00 to 12:01:00
		s.record("g", clk.at, lag, float64(i))
		if i < 6 {
			clk.at = clk.at.Add(10 * time.Second)
		}
	}
	h := s.history("g", false)
	if got := values(h.lag); !equalValues(got, []float64{5, 9, 7, 3, 4, 2}) {
		t.Errorf("hour's lag %v, want the six known samples", got)
	}
	if got := values(h.oldest); !equalValues(got, []float64{0, 1, 2, 3, 4, 5, 6}) {
		t.Errorf("hour's oldest %v", got)
	}
	if h.step != 10*time.Second || !h.to.Equal(clk.at) || !h.from.Equal(clk.at.Add(-time.Hour)) {
		t.Errorf("hour: step %v, %v to %v", h.step, h.from, h.to)
	}
	d := s.history("g", true)
	if got := values(d.lag); !equalValues(got, []float64{9}) {
		t.Errorf("day's lag %v, want [9] (12:00's largest; 12:01 unknown)", got)
	}
	if got := values(d.oldest); !equalValues(got, []float64{5, 6}) {
		t.Errorf("day's oldest %v, want [5 6]", got)
	}
	if !d.lag[0].At.Equal(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("day's first point at %v, want 12:00", d.lag[0].At)
	}
	// A second sample within a step replaces the first.
	s.record("g", clk.at.Add(time.Second), 8, 1)
	if h := s.history("g", false); h.lag[len(h.lag)-1].V != 8 {
		t.Errorf("the step's latest sample %v, want 8", h.lag[len(h.lag)-1])
	}
	if h := s.history("other", false); h.lag != nil || h.oldest != nil {
		t.Errorf("a group never sampled: %+v", h)
	}
}

// The rings hold a fixed span: a sample from more than an hour ago
// leaves the hour (its slot reused or stale), one from more than a day
// ago leaves the day; a group not seen for a day is forgotten.
func TestSamplerForgetsWhatIsOld(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{at: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	s := newSampler(nil, 10*time.Second, clk.now)
	s.record("g", clk.at, 1, 1)
	s.record("gone", clk.at, 1, 1)
	clk.at = clk.at.Add(time.Hour)
	if h := s.history("g", false); len(h.lag) != 0 {
		t.Errorf("an hour later the hour holds %v, want nothing", h.lag)
	}
	if h := s.history("g", true); len(h.lag) != 1 {
		t.Errorf("an hour later the day holds %v, want the sample", h.lag)
	}
	s.record("g", clk.at, 2, 2) // the same fine slot as an hour ago
	if h := s.history("g", false); !equalValues(values(h.lag), []float64{2}) {
		t.Errorf("the hour holds %v, want [2]", values(h.lag))
	}
	clk.at = clk.at.Add(24 * time.Hour)
	s.record("g", clk.at, 3, 3)
	if d := s.history("g", true); !equalValues(values(d.lag), []float64{3}) {
		t.Errorf("a day later the day holds %v, want [3]", values(d.lag))
	}
	s.endRound(clk.at, errors.New("boom"))
	if _, ok := s.groups["gone"]; ok {
		t.Error("a group not seen for a day is still kept")
	}
	if _, ok := s.groups["g"]; !ok {
		t.Error("a group seen this round was forgotten")
	}
	if h := s.history("g", false); h.lastErr == nil || !h.lastAt.Equal(clk.at) {
		t.Errorf("the round's error %v at %v, want boom at %v", h.lastErr, h.lastAt, clk.at)
	}
}

func TestNewSamplerRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, every := range []time.Duration{-1, time.Millisecond, 2 * time.Minute} {
		if _, err := NewSampler(nil, every); err == nil {
			t.Errorf("NewSampler(nil, %v): no error", every)
		}
	}
}

// A sampler that started within the range charts from its start (so
// its samples fill the chart), but over at least 60 steps.
func TestSamplerHistoryStartsAtTheSamplersStart(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{at: t0}
	s := newSampler(nil, 10*time.Second, clk.now)
	s.endRound(t0, nil)
	for _, tc := range []struct {
		after     time.Duration
		day       bool
		wantFrom  time.Time
		wantSince bool
	}{
		{5 * time.Minute, false, t0.Add(-5 * time.Minute), true}, // 60 steps of 10 s
		{30 * time.Minute, false, t0, true},
		{30 * time.Minute, true, t0, true},
		{2 * time.Hour, false, t0.Add(time.Hour), false}, // the last hour
		{2 * time.Hour, true, t0, true},
		{25 * time.Hour, true, t0.Add(time.Hour), false},
	} {
		clk.at = t0.Add(tc.after)
		s.endRound(clk.at, nil)
		if h := s.history("g", tc.day); !h.from.Equal(tc.wantFrom) || h.since != tc.wantSince || !h.to.Equal(clk.at) {
			t.Errorf("%v after the start (day %v): from %v since %v, want from %v since %v", tc.after, tc.day, h.from, h.since, tc.wantFrom, tc.wantSince)
		}
	}
}
