package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/idempotency"
)

// batchTests are the subtests of [Run] for an [idempotency.BatchStore]:
// what idempotency.Batch relies on.
var batchTests = []struct {
	name string
	test func(t *testing.T, s idempotency.BatchStore)
}{
	{"BatchClaimsFreeKeys", testBatchClaimsFreeKeys},
	{"BatchSkipsClaimedKeys", testBatchSkipsClaimedKeys},
	{"BatchFailedKeyStaysFree", testBatchFailedKeyStaysFree},
	{"BatchAllFailedLeavesKeysFree", testBatchAllFailedLeavesKeysFree},
	{"BatchPanicLeavesKeysFree", testBatchPanicLeavesKeysFree},
	{"BatchWrongLengthClaimsNothing", testBatchWrongLengthClaimsNothing},
	{"BatchRejectsBadKeys", testBatchRejectsBadKeys},
	{"BatchWaitsForClaimInProgress", testBatchWaitsForClaimInProgress},
	{"BatchesSharingKeysRunEachOnce", testBatchesSharingKeysRunEachOnce},
}

// runBatch runs the batch subtests on stores of newStore that implement
// [idempotency.BatchStore], and skips them for the others.
func runBatch(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	for _, tt := range batchTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			bs, ok := s.(idempotency.BatchStore)
			if !ok {
				t.Skipf("%T does not implement idempotency.BatchStore", s)
			}
			tt.test(t, bs)
		})
	}
}

// claimBatch calls s.ClaimBatch on keys with a fn that records the free
// indexes it got and fails the keys in fail; it fails t on a store error.
func claimBatch(ctx context.Context, t *testing.T, s idempotency.BatchStore, keys []string, fail ...string) (results []idempotency.ClaimResult, free []int) {
	t.Helper()
	results, err := s.ClaimBatch(ctx, keys, func(_ context.Context, got []int) []error {
		free = slices.Clone(got)
		errs := make([]error, len(got))
		for n, k := range got {
			if slices.Contains(fail, keys[k]) {
				errs[n] = fmt.Errorf("%w: %s", errFail, keys[k])
			}
		}
		return errs
	})
	if err != nil {
		t.Fatalf("ClaimBatch(%q): %v", keys, err)
	}
	if len(results) != len(keys) {
		t.Fatalf("ClaimBatch(%q) returned %d results, want %d", keys, len(results), len(keys))
	}
	return results, free
}

// wantFree fails t unless each of keys is free: a Claim of it runs fn.
func wantFree(ctx context.Context, t *testing.T, s idempotency.BatchStore, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if claimed, ran := claim(ctx, t, s.(idempotency.Store), k, nil); !claimed || !ran {
			t.Errorf("Claim(%q) after the batch: claimed=%v ran=%v, want the key free (both true)", k, claimed, ran)
		}
	}
}

// wantTaken fails t unless each of keys is claimed: a Claim of it does
// not run fn.
func wantTaken(ctx context.Context, t *testing.T, s idempotency.BatchStore, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if claimed, ran := claim(ctx, t, s.(idempotency.Store), k, nil); claimed || ran {
			t.Errorf("Claim(%q) after the batch: claimed=%v ran=%v, want the key taken (both false)", k, claimed, ran)
		}
	}
}

func testBatchClaimsFreeKeys(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	keys := []string{"c", "a", "b"}
	results, free := claimBatch(ctx, t, s, keys)
	if !slices.Equal(free, []int{0, 1, 2}) {
		t.Errorf("fn got free %v, want [0 1 2]", free)
	}
	for k, r := range results {
		if !r.Claimed || r.Err != nil {
			t.Errorf("result of %q = %+v, want claimed", keys[k], r)
		}
	}
	wantTaken(ctx, t, s, keys...)
}

func testBatchSkipsClaimedKeys(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	claim(ctx, t, s.(idempotency.Store), "b", nil)
	results, free := claimBatch(ctx, t, s, []string{"a", "b", "c"})
	if !slices.Equal(free, []int{0, 2}) {
		t.Errorf("fn got free %v, want [0 2] (b was claimed before)", free)
	}
	if r := results[1]; r.Claimed || r.Err != nil {
		t.Errorf("result of the claimed key = %+v, want {false, nil}", r)
	}
	if !results[0].Claimed || !results[2].Claimed {
		t.Errorf("results %+v, want a and c claimed", results)
	}
}

func testBatchFailedKeyStaysFree(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	results, _ := claimBatch(ctx, t, s, []string{"a", "b", "c"}, "b")
	if r := results[1]; r.Claimed || !errors.Is(r.Err, errFail) {
		t.Errorf("result of the failed key = %+v, want fn's error unchanged", r)
	}
	if !results[0].Claimed || !results[2].Claimed {
		t.Errorf("results %+v, want a and c claimed", results)
	}
	wantTaken(ctx, t, s, "a", "c")
	wantFree(ctx, t, s, "b")
}

func testBatchAllFailedLeavesKeysFree(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	results, _ := claimBatch(ctx, t, s, []string{"a", "b"}, "a", "b")
	for _, r := range results {
		if r.Claimed || !errors.Is(r.Err, errFail) {
			t.Errorf("result = %+v, want fn's error", r)
		}
	}
	wantFree(ctx, t, s, "a", "b")
}

func testBatchPanicLeavesKeysFree(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	func() {
		defer func() {
			if r := recover(); r != "batch panic" {
				t.Fatalf("recovered %v, want the panic of fn to propagate", r)
			}
		}()
		_, _ = s.ClaimBatch(ctx, []string{"a", "b"}, func(context.Context, []int) []error { panic("batch panic") })
	}()
	wantFree(ctx, t, s, "a", "b")
}

func testBatchWrongLengthClaimsNothing(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	_, err := s.ClaimBatch(ctx, []string{"a", "b"}, func(context.Context, []int) []error { return nil })
	if err == nil {
		t.Error("ClaimBatch with a fn that returned no errors for 2 keys: no error")
	}
	wantFree(ctx, t, s, "a", "b")
}

func testBatchRejectsBadKeys(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	for _, keys := range [][]string{{"a", ""}, {"a", "b", "a"}} {
		ran := false
		_, err := s.ClaimBatch(ctx, keys, func(_ context.Context, free []int) []error {
			ran = true
			return make([]error, len(free))
		})
		if err == nil || ran {
			t.Errorf("ClaimBatch(%q): err=%v ran=%v, want an error without running fn", keys, err, ran)
		}
		if keys[1] == "" && !errors.Is(err, idempotency.ErrEmptyKey) {
			t.Errorf("ClaimBatch(%q): err=%v, want ErrEmptyKey", keys, err)
		}
	}
	wantFree(ctx, t, s, "a", "b")
}

func testBatchWaitsForClaimInProgress(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	inFn, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.(idempotency.Store).Claim(ctx, "b", func(context.Context) error {
			close(inFn)
			<-release
			return nil
		})
		first <- err
	}()
	select {
	case <-inFn:
	case <-ctx.Done():
		t.Fatal("the single claim did not run fn")
	}
	type answer struct {
		results []idempotency.ClaimResult
		free    []int
		err     error
	}
	batch := make(chan answer, 1)
	go func() {
		var a answer
		a.results, a.err = s.ClaimBatch(ctx, []string{"a", "b"}, func(_ context.Context, free []int) []error {
			a.free = slices.Clone(free)
			return make([]error, len(free))
		})
		batch <- a
	}()
	// Any answer before b's claim ends is wrong: the batch cannot know
	// yet whether b is free.
	select {
	case a := <-batch:
		t.Fatalf("ClaimBatch returned while a claim of b was in progress: free %v, results %+v, err %v", a.free, a.results, a.err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("single claim: %v", err)
	}
	a := <-batch
	if a.err != nil {
		t.Fatalf("ClaimBatch: %v", a.err)
	}
	if !slices.Equal(a.free, []int{0}) || !a.results[0].Claimed || a.results[1].Claimed || a.results[1].Err != nil {
		t.Errorf("batch behind a claim of b: free %v, results %+v; want only a run and claimed, b claimed before", a.free, a.results)
	}
}

func testBatchesSharingKeysRunEachOnce(t *testing.T, s idempotency.BatchStore) {
	ctx := ctxWithLimit(t)
	const batches = 8
	var runs [6]atomic.Int32
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	var wg sync.WaitGroup
	errc := make(chan error, batches)
	for b := range batches {
		mine := slices.Clone(keys)
		if b%2 == 1 {
			slices.Reverse(mine) // the same keys in the other order
		}
		wg.Go(func() {
			_, err := s.ClaimBatch(ctx, mine, func(_ context.Context, free []int) []error {
				for _, k := range free {
					runs[mine[k][1]-'0'].Add(1)
				}
				return make([]error, len(free))
			})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Errorf("ClaimBatch: %v", err)
		}
	}
	for k := range runs {
		if n := runs[k].Load(); n != 1 {
			t.Errorf("key %s ran %d times in %d batches sharing it, want 1", keys[k], n, batches)
		}
	}
}
