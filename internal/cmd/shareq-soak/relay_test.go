package main

import (
	"flag"
	"fmt"
	"io"
	"testing"
)

// TestOutboxShare checks that -outbox picks about its share of the jobs,
// the same ones on every run, and that -short turns the outbox path and
// the relay faults off unless they are given.
func TestOutboxShare(t *testing.T) {
	p := &phase{name: phaseSingle}
	p.o.relay.outboxPct = 20
	n := 0
	for i := range 10000 {
		id := fmt.Sprintf("single-000000-7-%06d", i)
		if p.outboxJob(id) {
			n++
		}
		if p.outboxJob(id) != p.outboxJob(id) {
			t.Fatalf("job %s: chosen differently twice", id)
		}
	}
	if n < 1800 || n > 2200 {
		t.Fatalf("-outbox 20 chose %d of 10000 jobs, want about 2000", n)
	}
	if !p.outboxOn() {
		t.Fatal("outbox path off in the single-broker phase with -outbox 20")
	}
	if (&phase{name: phaseCluster3, o: p.o}).outboxOn() {
		t.Fatal("outbox path on in the 3-node phase")
	}

	for _, tc := range []struct {
		args                   []string
		pct                    float64
		sigkill, sigstop, code bool
	}{
		{args: nil, pct: 0},
		{args: []string{"-outbox", "10"}, pct: 10},
		{args: []string{"-outbox", "10", "-relay-sigstop"}, pct: 10, sigstop: true},
		{args: []string{"-outbox", "10", "-relays", "1"}, code: true},
	} {
		var rf relayFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		rf.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		code := rf.settle(fs, true)
		if (code != 0) != tc.code {
			t.Fatalf("%v: settle returned %d", tc.args, code)
		}
		if tc.code {
			continue
		}
		if rf.outboxPct != tc.pct || rf.sigkill != tc.sigkill || rf.sigstop != tc.sigstop {
			t.Fatalf("%v with -short: outbox %v, sigkill %v, sigstop %v; want %v, %v, %v",
				tc.args, rf.outboxPct, rf.sigkill, rf.sigstop, tc.pct, tc.sigkill, tc.sigstop)
		}
	}
}
