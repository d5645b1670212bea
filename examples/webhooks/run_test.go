package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/logbuf"
)

// The whole example on the embedded broker: the healthy endpoints get
// every webhook on its first delivery; the down endpoint's webhooks wait
// for it (its breaker opens once and closes once, one Warn and one Info
// line) and are delivered when it is back, with no delivery spent; the
// 429 ones are delivered once each, none before its Retry-After; the 410
// ones are parked; no endpoint has more than the per-host limit in
// flight, and none gets a webhook twice.
func TestRun(t *testing.T) {
	t.Parallel()
	var stdout, stderr logbuf.Buffer
	const n = 6
	cfg := config{PerEndpoint: n, Concurrency: 4, HTTPTimeout: 5 * time.Second, DownFor: 1500 * time.Millisecond, Timeout: 2 * time.Minute}
	s, err := run(t.Context(), cfg, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(s.Destinations) != 5 {
		t.Fatalf("%d destinations in the summary; want 5", len(s.Destinations))
	}
	byName := map[string]Destination{}
	for _, d := range s.Destinations {
		byName[d.Name] = d
		if d.Jobs != n || d.Redelivered != 0 || d.Duplicates != 0 || d.Other != 0 || d.MostAtOnce > perHost {
			t.Errorf("%s: %+v; want %d webhooks, none redelivered, none twice, none ended otherwise, at most %d at once",
				d.Name, d, n, perHost)
		}
	}
	for _, name := range []string{"shop-a", "shop-b"} {
		d := byName[name]
		if d.Delivered != n || d.Received != n || d.Runs != n || d.Waited+d.Snoozed+d.Parked != 0 || d.BreakerOpened != 0 {
			t.Errorf("healthy %s: %+v; want all %d delivered on their first run, none waited, snoozed or parked", name, d, n)
		}
	}
	if d := byName["shop-c"]; d.Delivered != n || d.Received != n || d.Waited != n || d.BreakerOpened != 1 || d.BreakerClosed != 1 {
		t.Errorf("down shop-c: %+v; want all %d delivered after it came back, all waited, its breaker opened and closed once", d, n)
	}
	if d := byName["shop-d"]; d.Delivered != n || d.Received != n || d.Snoozed != n || d.Early != 0 || d.Runs != 2*n || d.Parked != 0 {
		t.Errorf("429 shop-d: %+v; want all %d snoozed once and delivered on the run after, none before its Retry-After", d, n)
	}
	if d := byName["shop-e"]; d.Parked != n || d.Delivered != 0 || d.Runs != n {
		t.Errorf("410 shop-e: %+v; want all %d parked on their first run", d, n)
	}
	logs := stderr.String()
	if c := strings.Count(logs, "a key's destination is down"); c != 1 {
		t.Errorf("%d lines say a destination is down; want 1", c)
	}
	if c := strings.Count(logs, "a key's destination is back"); c != 1 {
		t.Errorf("%d lines say a destination is back; want 1", c)
	}
	for _, line := range []string{"every webhook ended in", "shop-c", "down, then back", "429 with Retry-After"} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("output lacks %q", line)
		}
	}
}

// A run that cannot finish in time says so.
func TestRunTimesOut(t *testing.T) {
	t.Parallel()
	var stdout, stderr logbuf.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := config{PerEndpoint: 1, Concurrency: 2, HTTPTimeout: time.Second, DownFor: time.Hour, Timeout: 3 * time.Second}
	_, err := run(ctx, cfg, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-timeout") {
		t.Fatalf("run with the down endpoint down for an hour = %v; want the -timeout error", err)
	}
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, err := parseFlags(nil, &stderr)
	want := config{PerEndpoint: 8, Concurrency: 4, HTTPTimeout: 5 * time.Second, DownFor: 2 * time.Second, Timeout: time.Minute}
	if err != nil || cfg != want {
		t.Errorf("no flags: %+v, %v; want %+v", cfg, err, want)
	}
	cfg, err = parseFlags([]string{"-webhooks", "3", "-concurrency", "8", "-http-timeout", "1s", "-down-for", "0s", "-timeout", "5s"}, &stderr)
	if want := (config{PerEndpoint: 3, Concurrency: 8, HTTPTimeout: time.Second, Timeout: 5 * time.Second}); err != nil || cfg != want {
		t.Errorf("flags: %+v, %v; want %+v", cfg, err, want)
	}
	for _, args := range [][]string{{"extra"}, {"-webhooks", "0"}, {"-concurrency", "0"}, {"-http-timeout", "0s"}, {"-down-for", "-1s"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("%q was accepted", args)
		}
	}
}
