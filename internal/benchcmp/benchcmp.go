// Package benchcmp runs two sides of a benchmark comparison interleaved,
// so that both see the same load of a shared machine: the outbox
// benchmarks of enqueue/pgoutbox and cmd/shareq-bench/outboxbench use it.
package benchcmp

import (
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
	var took [2]time.Duration
	var done [2]int
	ops := [2]func() error{opA, opB}
	b.ResetTimer()
	for k := 0; done[0]+done[1] < b.N; k++ {
		side := k % 2
		n := min(interleaveChunk, b.N-done[0]-done[1])
		var next atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for range par {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					if err := ops[side](); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		took[side] += time.Since(t0)
		done[side] += n
		if b.Failed() {
			b.FailNow()
		}
	}
	b.StopTimer()
	rate := func(i int) float64 {
		if took[i] == 0 {
			return 0
		}
		return float64(done[i]) / took[i].Seconds()
	}
	b.ReportMetric(rate(0), nameA+"-jobs/s")
	b.ReportMetric(rate(1), nameB+"-jobs/s")
	if rate(0) > 0 {
		b.ReportMetric(rate(1)/rate(0), nameB+"/"+nameA)
	}
	b.ReportMetric(0, "ns/op")
}
