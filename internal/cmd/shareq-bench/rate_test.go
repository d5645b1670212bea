package main

import (
	"log/slog"
	"testing"
	"time"
)

// The rate scenario's figures on kfake, two worker processes at 20 jobs
// a second for 3 s: no second above 1.1× the limit, no delivery spent,
// both processes ran jobs. The fleet's rate is the benchmark's to report.
func TestRateScenarioHoldsTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for about 15 s")
	}
	c, err := newCluster(t.Context(), "kfake")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	r, err := runRate(t.Context(), c, slog.New(slog.DiscardHandler), 20, 2, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Started == 0 || r.MaxWindow > 22 || r.Spent != 0 || len(r.PerProc) != 2 || r.PerProc[0] == 0 || r.PerProc[1] == 0 {
		t.Errorf("%d started, at most %d in 1 s, %d deliveries spent, per process %v; want some, <= 22, 0, both > 0",
			r.Started, r.MaxWindow, r.Spent, r.PerProc)
	}
}
