package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	statusfleet "github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/worker"
)

// Stalled partitions and their heals (worker.HealStalls, on in the soak's
// workers unless -heal-stalls=false): each worker reports "EVENT stall
// TOPIC/P true|false" when its stall check finds a partition the broker
// stopped serving and when it moves again, and "EVENT heal TOPIC/P
// RESULT" after each heal it tried. Every worker checks for itself, so a
// stall is timed from the first worker's report to the first report that
// it moves.
type stallTally struct {
	since    map[string]time.Time // partition → first report of its stall, while stalled
	reported int                  // stalls reported (by the first worker)
	moved    []string             // "TOPIC/P after 1m2s", the stalls that ended
	heals    map[string]int       // result → heal tries
}

// event takes a stall or heal event's fields (after "EVENT").
func (s *stallTally) event(kind string, args []string, now time.Time) {
	if s.since == nil {
		s.since, s.heals = map[string]time.Time{}, map[string]int{}
	}
	if len(args) < 2 {
		return
	}
	p := args[0]
	switch kind {
	case "stall":
		since, stalled := s.since[p]
		switch {
		case args[1] == "true" && !stalled:
			s.since[p] = now
			s.reported++
		case args[1] == "false" && stalled:
			delete(s.since, p)
			s.moved = append(s.moved, fmt.Sprintf("%s after %v", p, now.Sub(since).Round(time.Second)))
		}
	case "heal":
		s.heals[args[1]]++
	}
}

// stallReport is what the phase's report says of stalls.
type stallReport struct {
	reported int
	moved    []string
	still    []string // partitions stalled at the end
	heals    map[string]int
}

func (s *stallTally) report() stallReport {
	return stallReport{reported: s.reported, moved: slices.Clone(s.moved),
		still: slices.Sorted(maps.Keys(s.since)), heals: maps.Clone(s.heals)}
}

// lines returns the report's lines on stalls.
func (r stallReport) lines() []string {
	if r.reported == 0 && len(r.heals) == 0 {
		return []string{"stalled partitions       none reported by the workers' stall checks"}
	}
	out := []string{fmt.Sprintf("stalled partitions       %d reported; heal tries %s", r.reported, fmtCounts(r.heals))}
	if len(r.moved) > 0 {
		out = append(out, "  moving again           "+strings.Join(r.moved, ", ")+" (from the first report)")
	}
	if len(r.still) > 0 {
		out = append(out, "  still stalled          "+strings.Join(r.still, ", "))
	}
	return out
}

// ensureStatusTopic creates the workers' status topic (as shareq topics
// create -workers does) unless it exists.
func (p *phase) ensureStatusTopic(ctx context.Context, rf int16) error {
	_, err := p.adm.CreateTopic(ctx, 1, rf, statusfleet.TopicConfigs(), worker.StatusTopicDefault)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create the status topic %s (HealStalls needs it): %w", worker.StatusTopicDefault, err)
	}
	return nil
}
