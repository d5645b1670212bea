package main

import (
	"log/slog"
	"slices"
	"testing"
)

// The burst scenario on kfake: three worker processes, each running the
// jobs of its two partitions, with shareq's partitioner; all on one
// worker with franz-go's default. Makespans are the benchmark's to
// report, not this test's: it checks the split, which does not depend on
// the machine's load.
func TestBurstSplitsOverWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two bursts of a few seconds")
	}
	c, err := newCluster(t.Context(), "kfake")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	log := slog.New(slog.DiscardHandler)

	spread, err := runBurst(t.Context(), c, log, false)
	if err != nil {
		t.Fatal(err)
	}
	even := burstJobs / burstWorkers
	if !slices.Equal(spread.PerWorker, []int{even, even, even}) || spread.Partitions != burstPartitions || spread.Dups != 0 {
		t.Errorf("enqueue.Partitioner: jobs per worker %v, %d partitions, %d duplicates; want %d each, %d, 0",
			spread.PerWorker, spread.Partitions, spread.Dups, even, burstPartitions)
	}

	sticky, err := runBurst(t.Context(), c, log, true)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Max(sticky.PerWorker) != burstJobs || sticky.Partitions != 1 {
		t.Errorf("default partitioner: jobs per worker %v, %d partitions; want all %d on one worker, from 1 partition",
			sticky.PerWorker, sticky.Partitions, burstJobs)
	}
}
