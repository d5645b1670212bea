package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/member"
)

// A key's breaker probes on its schedule (1 s, then 2 s later, …) even
// when the executor wakes for something else in between: here a snoozed
// job of another key falls due between the first probe and the second.
// The second probe is due 3 s after the breaker opened; the key is back
// by then, so its job is accepted within a moment of it, not at the next
// lock renewal (15 s on a 30 s lock).
func TestKeyProbeKeepsItsTimeWhenTheExecutorWakesForOtherWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var isDown atomic.Bool
		isDown.Store(true)
		var backAt atomic.Int64 // when the probe that got through ran, Unix ns
		h := handler.Func(func(_ context.Context, job *handler.Job) error {
			switch string(job.Key) {
			case "k1": // its key's destination
				if isDown.Load() {
					return handler.KeyUnavailable(errors.New("connection refused"))
				}
				backAt.Store(time.Now().UnixNano())
			case "k2": // another key's job, snoozed once for a moment
				if job.Snoozes() == 0 {
					return handler.Snooze(500 * time.Millisecond)
				}
			}
			return nil
		})
		b := startExecutor(t, h, nil, Concurrency(4),
			KeyLimit("t", Keys{Key: RecordKey}))
		opened := time.Now()
		b.f.deliver(delivery(1, 1, lock))
		synctest.Wait()
		time.Sleep(time.Second + 10*time.Millisecond) // the first probe: still down
		synctest.Wait()
		if acks := b.f.acksOf(1); len(acks) != 0 {
			t.Fatalf("the job of the key that is down was acknowledged (%v); want it held", acks)
		}
		isDown.Store(false)
		b.f.deliver(delivery(2, 1, lock)) // snoozed, due in 500 ms: the executor wakes for it
		synctest.Wait()
		time.Sleep(3*time.Second + 100*time.Millisecond - time.Since(opened)) // past the second probe
		synctest.Wait()
		wantAcks(t, b.f, 2, member.Accept)
		if acks := b.f.acksOf(1); len(acks) != 1 || acks[0] != member.Accept {
			time.Sleep(lock)
			synctest.Wait()
			t.Errorf("3.1 s after the breaker opened (its second probe due at 3 s) the key's job has acks %v; want ACCEPT "+
				"(the probe ran %v after the breaker opened: it waited for another wake-up)", acks, time.Unix(0, backAt.Load()).Sub(opened))
		}
		b.stop(t)
	})
}
