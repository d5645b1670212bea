package main

import (
	"strings"
	"testing"
	"time"
)

// Every remedy -probe-remedies lists parses, a leave or reconnect remedy
// takes its time away from its name, and a name that is not a remedy is
// refused with the list of those there are.
func TestParseRemedy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		away time.Duration
	}{
		{"leave-0s", 0}, {"leave-5s", 5 * time.Second}, {"leave-45s", 45 * time.Second},
		{"leave-keep-conn-5s", 5 * time.Second}, {"reconnect-2s", 2 * time.Second},
		{"close-session", 0}, {"poke", 0}, {"close-session-poke", 0},
		{"alter-start", 0}, {"alter-next", 0}, {"delete-offsets", 0},
	} {
		r, err := parseRemedy(c.name)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if r.name != c.name || r.away != c.away || r.apply == nil || r.about == "" {
			t.Errorf("%s: got name %q, away %v, apply set %v, about %q", c.name, r.name, r.away, r.apply != nil, r.about)
		}
	}
	for _, bad := range []string{"", "leave", "leave-", "leave--5s", "leave-5", "reconnect-x", "restart"} {
		if _, err := parseRemedy(bad); err == nil || !strings.Contains(err.Error(), "have leave-<d>") {
			t.Errorf("%q: want an error listing the remedies, got %v", bad, err)
		}
	}
}
