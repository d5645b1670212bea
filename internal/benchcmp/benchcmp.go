// Package benchcmp runs two sides of a benchmark comparison interleaved,
// so that both see the same load of a shared machine: the outbox
// benchmarks of enqueue/pgoutbox and internal/cmd/shareq-bench/outboxbench
// use it, and shareq-bench's producer scenario.
package benchcmp

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ParName names a variant by how many operations run at once.
func ParName(par int) string {
	if par == 1 {
		return "serial"
	}
	return fmt.Sprintf("%d-at-once", par)
}

// interleaveChunk is how many operations of one side run before the
// other side's turn.
const interleaveChunk = 100

// Interleave runs b.N operations, alternating between opA and opB every
// interleaveChunk operations, par at a time, so that both sides see the
// same load on a shared machine. It reports each side's operations per
// second and the ratio B/A.
func Interleave(b *testing.B, par int, nameA string, opA func() error, nameB string, opB func() error) {
	b.ResetTimer()
	rateA, rateB, err := Alternate(b.N, par, opA, opB)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rateA, nameA+"-jobs/s")
	b.ReportMetric(rateB, nameB+"-jobs/s")
	if rateA > 0 {
		b.ReportMetric(rateB/rateA, nameB+"/"+nameA)
	}
	b.ReportMetric(0, "ns/op")
}

// Alternate runs n operations, alternating between opA and opB every
// interleaveChunk operations, par at a time, and returns each side's
// operations per second. The first error of an operation ends it (the
// operations of its chunk already running finish).
func Alternate(n, par int, opA, opB func() error) (rateA, rateB float64, err error) {
	var took [2]time.Duration
	var done [2]int
	ops := [2]func() error{opA, opB}
	for k := 0; done[0]+done[1] < n; k++ {
		side := k % 2
		m := min(interleaveChunk, n-done[0]-done[1])
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		t0 := time.Now()
		for range par {
			wg.Go(func() {
				for next.Add(1) <= int64(m) {
					if err := ops[side](); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return 0, 0, first
		}
		took[side] += time.Since(t0)
		done[side] += m
	}
	rate := func(i int) float64 {
		if took[i] == 0 {
			return 0
		}
		return float64(done[i]) / took[i].Seconds()
	}
	return rate(0), rate(1), nil
}
