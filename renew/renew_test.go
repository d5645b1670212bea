package renew_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shareq/shareq/renew"
)

// run plays a worker that renews every lock the tracker calls due, with the
// broker confirming each renewal after rtt, for total time; it returns the
// renewal times of key 1 and when it went over its hold time.
func run(t *testing.T, p renew.Policy, lock, rtt, total time.Duration) (renews []time.Duration, over time.Duration) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := renew.NewTracker[int](p)
		tr.Add(1, start, start.Add(lock), 0)
		for {
			next, ok := tr.Next()
			if !ok || next.Sub(start) > total {
				break
			}
			time.Sleep(time.Until(next))
			due, overHold := tr.Due(time.Now())
			for _, k := range due {
				sent := time.Now()
				renews = append(renews, sent.Sub(start))
				time.Sleep(rtt)
				tr.Renewed(k, sent)
				if got := tr.Deadline(k); !got.After(time.Now()) {
					t.Fatalf("deadline %v after renewal is not in the future", got.Sub(start))
				}
			}
			if slices.Contains(overHold, 1) {
				over = time.Since(start)
				return
			}
		}
	})
	return renews, over
}

func TestRenewEveryHalfLockByDefault(t *testing.T) {
	t.Parallel()
	renews, over := run(t, renew.Policy{MaxHold: time.Hour}, 2*time.Second, 10*time.Millisecond, 6500*time.Millisecond)
	want := []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 6 * time.Second}
	if !slices.Equal(renews, want) {
		t.Fatalf("renewals at %v, want %v", renews, want)
	}
	if over != 0 {
		t.Fatalf("went over hold time at %v", over)
	}
}

func TestRenewMarginBeforeDeadline(t *testing.T) {
	t.Parallel()
	renews, _ := run(t, renew.Policy{Margin: 5 * time.Second, MaxHold: time.Hour}, 30*time.Second, 0, 80*time.Second)
	want := []time.Duration{25 * time.Second, 50 * time.Second, 75 * time.Second}
	if !slices.Equal(renews, want) {
		t.Fatalf("renewals at %v, want %v", renews, want)
	}
}

func TestMarginLargerThanHalfLockIsClamped(t *testing.T) {
	t.Parallel()
	renews, _ := run(t, renew.Policy{Margin: time.Minute, MaxHold: time.Hour}, 2*time.Second, 0, 3500*time.Millisecond)
	want := []time.Duration{1 * time.Second, 2 * time.Second, 3 * time.Second}
	if !slices.Equal(renews, want) {
		t.Fatalf("renewals at %v, want %v", renews, want)
	}
}

func TestMaxHoldStopsRenewing(t *testing.T) {
	t.Parallel()
	renews, over := run(t, renew.Policy{MaxHold: 2500 * time.Millisecond}, 2*time.Second, 0, time.Minute)
	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(renews, want) {
		t.Fatalf("renewals at %v, want %v", renews, want)
	}
	if over != 2500*time.Millisecond {
		t.Fatalf("over hold time at %v, want 2.5s", over)
	}
}

func TestPendingRenewalIsNotSentTwice(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := renew.NewTracker[string](renew.Policy{MaxHold: time.Hour})
		tr.Add("a", start, start.Add(2*time.Second), 0)
		time.Sleep(time.Second)
		due, _ := tr.Due(time.Now())
		if !slices.Equal(due, []string{"a"}) {
			t.Fatalf("due = %v, want [a]", due)
		}
		time.Sleep(100 * time.Millisecond)
		if due, _ := tr.Due(time.Now()); len(due) != 0 {
			t.Fatalf("renewal sent again while pending: %v", due)
		}
		tr.RenewFailed("a", time.Now().Add(200*time.Millisecond))
		if got := tr.Deadline("a"); !got.Equal(start.Add(2 * time.Second)) {
			t.Fatalf("failed renewal moved the deadline to %v", got.Sub(start))
		}
		if due, _ := tr.Due(time.Now()); len(due) != 0 {
			t.Fatalf("retried a failed renewal at once: %v", due)
		}
		if next, _ := tr.Next(); next.Sub(start) != 1300*time.Millisecond {
			t.Fatalf("next wake at %v, want 1.3s", next.Sub(start))
		}
		time.Sleep(200 * time.Millisecond)
		if due, _ := tr.Due(time.Now()); !slices.Equal(due, []string{"a"}) {
			t.Fatalf("after the retry delay due = %v, want [a] again", due)
		}
		tr.Remove("a")
		if _, ok := tr.Next(); ok || tr.Len() != 0 {
			t.Fatal("removed job still tracked")
		}
	})
}

func TestExpired(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		left time.Duration
		want bool
	}{{-time.Second, true}, {0, true}, {50 * time.Millisecond, true}, {time.Second, false}} {
		if got := renew.Expired(now, now.Add(tc.left), 100*time.Millisecond); got != tc.want {
			t.Errorf("Expired with %v left = %v, want %v", tc.left, got, tc.want)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	if err := (renew.Policy{MaxHold: time.Minute}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (renew.Policy{Margin: -1}).Validate(); err == nil {
		t.Fatal("negative margin and zero MaxHold accepted")
	}
}

func TestTrackerRenewedUntilTakesTheReportedDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := renew.NewTracker[string](renew.Policy{MaxHold: time.Hour})
		tr.Add("a", start, start.Add(10*time.Second), 10*time.Second)
		time.Sleep(5 * time.Second)
		if due, _ := tr.Due(time.Now()); !slices.Equal(due, []string{"a"}) {
			t.Fatalf("due = %v, want [a]", due)
		}
		// The member reports send time + the lock the broker answered with.
		tr.RenewedUntil("a", start.Add(14*time.Second))
		if got := tr.Deadline("a"); !got.Equal(start.Add(14 * time.Second)) {
			t.Fatalf("deadline %v, want 14s", got.Sub(start))
		}
		if at, ok := tr.When("a"); !ok || at.Sub(start) != 9*time.Second {
			t.Fatalf("When = %v %v, want 9s (half the lock before 14s)", at.Sub(start), ok)
		}
		tr.RenewedUntil("a", start.Add(12*time.Second)) // stale: ignored
		if got := tr.Deadline("a"); !got.Equal(start.Add(14 * time.Second)) {
			t.Fatalf("an earlier deadline moved it back to %v", got.Sub(start))
		}
	})
}

func TestTrackerRelockTakesTheNewDeliverysLock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		tr := renew.NewTracker[string](renew.Policy{MaxHold: time.Minute})
		tr.Add("a", start, start.Add(4*time.Second), 4*time.Second)
		time.Sleep(2 * time.Second)
		if due, _ := tr.Due(time.Now()); len(due) != 1 {
			t.Fatalf("due = %v, want [a]", due)
		}
		// The renewal is lost; the record is delivered again with a 6 s lock.
		tr.Relock("a", start.Add(8*time.Second), 6*time.Second)
		if got := tr.Deadline("a"); !got.Equal(start.Add(8 * time.Second)) {
			t.Fatalf("deadline %v, want 8s", got.Sub(start))
		}
		if at, ok := tr.When("a"); !ok || at.Sub(start) != 5*time.Second {
			t.Fatalf("When = %v %v, want 5s (not waiting on the old renewal)", at.Sub(start), ok)
		}
	})
}

func TestTrackerWhenAgreesWithNext(t *testing.T) {
	t.Parallel()
	start := time.Now()
	tr := renew.NewTracker[int](renew.Policy{MaxHold: 3 * time.Second})
	tr.Add(1, start, start.Add(10*time.Second), 10*time.Second) // MaxHold first: 3s
	tr.Add(2, start, start.Add(2*time.Second), 2*time.Second)   // renewal first: 1s
	for k, want := range map[int]time.Duration{1: 3 * time.Second, 2: time.Second} {
		if at, ok := tr.When(k); !ok || at.Sub(start) != want {
			t.Errorf("When(%d) = %v %v, want %v", k, at.Sub(start), ok, want)
		}
	}
	if next, _ := tr.Next(); next.Sub(start) != time.Second {
		t.Errorf("Next = %v, want 1s", next.Sub(start))
	}
	tr.Remove(2)
	tr.Add(3, start, start.Add(time.Second), 0) // reuses 2's entry
	if at, _ := tr.When(3); at.Sub(start) != 500*time.Millisecond {
		t.Errorf("When(3) = %v, want 500ms", at.Sub(start))
	}
	if _, ok := tr.When(2); ok {
		t.Error("When of a removed key reports a time")
	}
}

// A job given one more hold past MaxHold (its copy being written) is
// renewed again and reported over once more, a MaxHold after the rehold.
func TestTrackerReholdRenewsAgainUntilTheNewHoldEnds(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_000, 0)
	tr := renew.NewTracker[string](renew.Policy{MaxHold: 3 * time.Second})
	tr.Add("a", start, start.Add(2*time.Second), 2*time.Second)
	at := start.Add(3 * time.Second)
	if _, over := tr.Due(at); !slices.Equal(over, []string{"a"}) {
		t.Fatalf("over = %v at MaxHold, want [a]", over)
	}
	if _, ok := tr.When("a"); ok {
		t.Fatal("a job over MaxHold still has a next time")
	}
	tr.Rehold("a", at)
	if next, ok := tr.When("a"); !ok || !next.Equal(start.Add(time.Second)) {
		t.Fatalf("after the rehold the next time is %v (%v); want the overdue renewal at 1s", next.Sub(start), ok)
	}
	if due, over := tr.Due(at); !slices.Equal(due, []string{"a"}) || len(over) != 0 {
		t.Fatalf("after the rehold: due %v, over %v; want a renewal and nothing over", due, over)
	}
	tr.Renewed("a", at)
	if _, over := tr.Due(at.Add(3*time.Second - time.Millisecond)); len(over) != 0 {
		t.Fatalf("over %v before the new hold ends", over)
	}
	if _, over := tr.Due(at.Add(3 * time.Second)); !slices.Equal(over, []string{"a"}) {
		t.Fatalf("over = %v a MaxHold after the rehold, want [a]", over)
	}
}
