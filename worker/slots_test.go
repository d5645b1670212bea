package worker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestSlotsPreferHotLanesUntilColdOnesStarve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(1, time.Second)
		ctx := context.Background()
		if err := s.acquire(ctx, 1, false); err != nil {
			t.Fatal(err)
		}
		var order []string
		wait := func(name string, hot bool) {
			go func() {
				if err := s.acquire(ctx, 1, hot); err != nil {
					t.Error(err)
					return
				}
				order = append(order, name)
				s.release(1)
			}()
		}
		wait("cold-1", false)
		synctest.Wait()
		wait("hot-1", true)
		synctest.Wait()
		wait("hot-2", true)
		synctest.Wait()
		if !s.waiting() {
			t.Fatal("no waiters")
		}
		s.release(1)
		synctest.Wait()
		if got := order; len(got) != 3 || got[0] != "hot-1" || got[1] != "hot-2" || got[2] != "cold-1" {
			t.Fatalf("order %v, want hot lanes first", got)
		}

		// A cold lane that waited past the starvation limit longer than
		// the first hot one goes first.
		order = nil
		if err := s.acquire(ctx, 1, false); err != nil {
			t.Fatal(err)
		}
		wait("cold-2", false)
		synctest.Wait()
		time.Sleep(1500 * time.Millisecond)
		wait("hot-3", true)
		synctest.Wait()
		synctest.Wait()
		s.release(1)
		synctest.Wait()
		if len(order) != 2 || order[0] != "cold-2" {
			t.Fatalf("order %v, want the starved cold lane first", order)
		}
	})
}

func TestSlotsCancelledWaitGivesNothingAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSlots(2, time.Second)
		if err := s.acquire(context.Background(), 2, true); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := s.acquire(ctx, 1, true); err == nil {
			t.Fatal("acquired a slot that was not free")
		}
		s.release(2)
		if s.waiting() {
			t.Fatal("a cancelled waiter is still queued")
		}
		if err := s.acquire(context.Background(), 2, false); err != nil {
			t.Fatal(err)
		}
	})
}
