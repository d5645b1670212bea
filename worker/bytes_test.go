package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// MaxBytesInHand bounds the records a worker holds by their bytes, below
// what Concurrency allows: with records of size bytes, at most bound ÷
// size of them plus one (a fetch's overshoot) are in hand, so at most
// that many handlers run at once; a record larger than the bound runs
// alone. Every job runs once.
func TestMaxBytesInHand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		size, bound int64
		maxRunning  int64
	}{
		{"records smaller than the bound", 100 << 10, 300 << 10, 4},
		{"records larger than the bound", 200 << 10, 50 << 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 1)
			const n = 24
			recs := make([]*kgo.Record, n)
			for i := range recs {
				key := fmt.Sprintf("job-%02d", i)
				recs[i] = &kgo.Record{Topic: b.topic, Key: []byte(key), Value: make([]byte, tc.size-int64(len(key)))}
			}
			b.c.Produce(t, recs...)
			var running, peak atomic.Int64
			h := handler.Func(func(ctx context.Context, job *handler.Job) error {
				now := running.Add(1)
				defer running.Add(-1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				return nil
			})
			b.start(t, h, worker.Concurrency(8), worker.MaxBytesInHand(tc.bound))
			fs := b.obs.WaitFor(t, 60*time.Second, fmt.Sprintf("%d jobs", n), func(fs []finished) bool { return len(fs) >= n })
			for i := range n {
				key := fmt.Sprintf("job-%02d", i)
				if got := count(fs, key, worker.AckAccept); got != 1 {
					t.Errorf("%s accepted %d times, want once", key, got)
				}
			}
			for _, f := range fs {
				if f.Count != 1 {
					t.Errorf("%s delivered %d times", f.Key, f.Count)
				}
			}
			if p := peak.Load(); p < 1 || p > tc.maxRunning {
				t.Errorf("%d handlers ran at once, want 1 to %d (bound %d bytes, records of %d)", p, tc.maxRunning, tc.bound, tc.size)
			}
			t.Logf("%s: at most %d handlers at once", b.c.Kind, peak.Load())
		})
	}
}
