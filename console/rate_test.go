package console

import (
	"testing"
	"time"

	"github.com/shareq/shareq/internal/sharegroup"
)

func TestRateFromLagMovement(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	s := &server{rates: map[string]rateSample{}, now: func() time.Time { return at }}
	status := func(hw, lag int64) *sharegroup.Status {
		return &sharegroup.Status{Partitions: []sharegroup.Partition{{HighWatermark: &hw, Lag: &lag}}}
	}
	if r := s.rate("g", status(100, 100)); r != "" {
		t.Errorf("first sample: %q, want none", r)
	}
	at = at.Add(500 * time.Millisecond)
	if r := s.rate("g", status(100, 50)); r != "" {
		t.Errorf("after half a second: %q, want none (too short to tell)", r)
	}
	at = at.Add(2 * time.Second)
	// Done: 200-30 now, 100-50 at the last sample: 120 in 2 s.
	if r := s.rate("g", status(200, 30)); r != "60" {
		t.Errorf("rate %q, want 60", r)
	}
	at = at.Add(4 * time.Second)
	if r := s.rate("g", status(200, 24)); r != "1.5" {
		t.Errorf("rate %q, want 1.5", r)
	}
	at = at.Add(time.Second)
	if r := s.rate("g", status(10, 0)); r != "" {
		t.Errorf("after a reset to a lower done count: %q, want none", r)
	}
	lagless := &sharegroup.Status{Partitions: []sharegroup.Partition{{}}}
	if r := s.rate("g", lagless); r != "" {
		t.Errorf("without a lag (Kafka before 4.2): %q, want none", r)
	}
}
