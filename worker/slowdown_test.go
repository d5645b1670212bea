package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// Jobs that suddenly take longer than the lock (a destination that slows
// down) leave the records the worker already holds waiting for a slot
// longer than their lock: the worker renews their locks while they wait,
// so a delivery is spent only by a run. Every healthy job runs once, on
// delivery 1; failing jobs are parked after exactly the delivery limit's
// runs (none lost to a lock that ran out in the queue).
func TestSlowdownKeepsQueuedRecordsLocked(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	dlqTopic := b.topic + ".dlq"
	b.c.CreateTopic(t, dlqTopic, 1)
	limit := int32(b.c.DeliveryLimit)

	const (
		conc    = 4
		fast    = 300 // 20 ms jobs, enough for the prefetch to grow
		failing = 6   // always fail, interleaved with the fast ones
		after   = 40  // fast jobs started after the slowdown
	)
	slow := b.c.LockDuration + b.c.LockDuration/2
	var (
		mu      sync.Mutex
		runs    = map[string][]int32{} // delivery count of each run, by key
		late    int                    // runs started after their record's first lock ran out
		started atomic.Int32
		slowed  atomic.Int32 // slow runs begun: the first conc starts after the switch
	)
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		key := string(job.Key)
		mu.Lock()
		runs[key] = append(runs[key], job.DeliveryCount)
		if time.Now().After(job.LockDeadline) {
			late++
		}
		mu.Unlock()
		d := 20 * time.Millisecond
		// Past the switch the next conc jobs take longer than the lock:
		// every slot busy, the records in hand wait behind them.
		if started.Add(1) > fast/2 && slowed.Add(1) <= conc {
			d = slow
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		if len(key) > 4 && key[:4] == "fail" {
			return errors.New("destination answers 500")
		}
		return nil
	})
	park, err := dlq.Middleware(b.c.Client(t), dlq.Topic(dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*kgo.Record, 0, fast+after)
	for i := range fast + after {
		key := fmt.Sprintf("ok-%03d", i)
		if i%50 == 7 && i/50 < failing { // in place of a healthy one
			key = fmt.Sprintf("fail-%d", i/50)
		}
		recs = append(recs, &kgo.Record{Topic: b.topic, Partition: int32(i % 3), Key: []byte(key), Value: []byte(key)})
	}
	b.c.ProduceBatch(t, recs...)
	b.start(t, handler.Chain(h, park), worker.Concurrency(conc),
		worker.RetryBackoff(func(int32) time.Duration { return 0 }))

	total := len(recs)
	b.obs.WaitFor(t, 6*slow+90*time.Second, "every job finished", func(fs []shareqtest.Event) bool {
		final := map[string]bool{}
		for _, f := range fs {
			if f.Result.Final {
				final[f.Key] = true
			}
		}
		return len(final) == total
	})

	mu.Lock()
	defer mu.Unlock()
	if late == 0 {
		t.Errorf("no job started after its record's first lock ran out: no record waited in the queue past its lock, the test proves nothing (slow %v, lock %v)", slow, b.c.LockDuration)
	}
	var failed, unstarted, parked int
	for _, f := range b.obs.Events() {
		if f.Result.Outcome == worker.OutcomeParked {
			parked++
		}
		if errors.Is(f.Result.Err, worker.ErrLockExpired) || errors.Is(f.Result.Err, worker.ErrLockLost) {
			unstarted++
			t.Errorf("%s: %v (delivery %d)", f.Key, f.Result.Err, f.Count)
		}
	}
	for key, counts := range runs {
		if key[:4] == "fail" {
			failed++
			if len(counts) != int(limit) || counts[len(counts)-1] != limit {
				t.Errorf("%s ran with delivery counts %v, want %d runs, the last on delivery %d", key, counts, limit, limit)
			}
			continue
		}
		if len(counts) != 1 || counts[0] != 1 {
			t.Errorf("%s ran with delivery counts %v, want once on delivery 1", key, counts)
		}
	}
	if failed != failing {
		t.Errorf("%d failing jobs ran, want %d", failed, failing)
	}
	if parked != failing {
		t.Errorf("%d jobs parked, want the %d failing ones", parked, failing)
	}
	t.Logf("%s: %d jobs, %d started after their first lock ran out, %d released unstarted, %d parked; lock %v, slow jobs %v",
		b.c.Kind, total, late, unstarted, parked, b.c.LockDuration, slow)
}
