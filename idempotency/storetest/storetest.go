// Package storetest is the conformance suite every [idempotency.Store]
// passes. Run it from a store's tests:
//
//	func TestMemoryStoreConformance(t *testing.T) {
//		t.Parallel()
//		storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore() })
//	}
//
// The suite checks what [idempotency.Middleware] relies on; it cannot check
// that a store's effects are transactional, which each store tests itself.
package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shareq/shareq/idempotency"
)

// waitLimit bounds every wait in the suite, so a store that deadlocks
// fails instead of hanging the test binary.
const waitLimit = 10 * time.Second

// Run runs the suite. newStore must return a new, empty store for each
// call; Run calls it once per subtest, and the subtests run in parallel.
// The sweep subtest runs only for stores that implement
// [idempotency.Sweeper], and the Batch subtests only for those that
// implement [idempotency.BatchStore]; they skip otherwise.
func Run(t *testing.T, newStore func(t *testing.T) idempotency.Store) {
	t.Helper()
	tests := []struct {
		name string
		test func(t *testing.T, s idempotency.Store)
	}{
		{"FirstClaimRunsFn", testFirstClaimRunsFn},
		{"SecondClaimSkipsFn", testSecondClaimSkipsFn},
		{"FnErrorLeavesKeyFree", testFnErrorLeavesKeyFree},
		{"FnPanicLeavesKeyFree", testFnPanicLeavesKeyFree},
		{"FnSeesCallerContext", testFnSeesCallerContext},
		{"EmptyKeyIsRejected", testEmptyKeyIsRejected},
		{"KeysAreIndependent", testKeysAreIndependent},
		{"ConcurrentClaimsRunOnce", testConcurrentClaimsRunOnce},
		{"ConcurrentClaimsAfterFailure", testConcurrentClaimsAfterFailure},
		{"DistinctKeysRunInParallel", testDistinctKeysRunInParallel},
		{"WaitingClaimHonoursContext", testWaitingClaimHonoursContext},
		{"SweepRemovesOldClaimsOnly", testSweepRemovesOldClaimsOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.test(t, newStore(t))
		})
	}
	runBatch(t, newStore)
}

func ctxWithLimit(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// claim calls s.Claim with a fn that counts its runs and returns fnErr.
func claim(ctx context.Context, t *testing.T, s idempotency.Store, key string, fnErr error) (claimed, ran bool) {
	t.Helper()
	claimed, err := s.Claim(ctx, key, func(context.Context) error {
		ran = true
		return fnErr
	})
	if fnErr == nil && err != nil {
		t.Fatalf("Claim(%q): %v", key, err)
	}
	if fnErr != nil && !errors.Is(err, fnErr) {
		t.Fatalf("Claim(%q) with failing fn: err = %v, want fn's error %v", key, err, fnErr)
	}
	return claimed, ran
}

func testFirstClaimRunsFn(t *testing.T, s idempotency.Store) {
	claimed, ran := claim(ctxWithLimit(t), t, s, "job-1", nil)
	if !claimed || !ran {
		t.Fatalf("first Claim: claimed=%v ran=%v, want both true", claimed, ran)
	}
}

func testSecondClaimSkipsFn(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	claim(ctx, t, s, "job-1", nil)
	claimed, ran := claim(ctx, t, s, "job-1", nil)
	if claimed || ran {
		t.Fatalf("second Claim: claimed=%v ran=%v, want both false", claimed, ran)
	}
}

func testFnErrorLeavesKeyFree(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	boom := errors.New("boom")
	claimed, ran := claim(ctx, t, s, "job-1", boom)
	if claimed || !ran {
		t.Fatalf("failing Claim: claimed=%v ran=%v, want false, true", claimed, ran)
	}
	claimed, ran = claim(ctx, t, s, "job-1", nil)
	if !claimed || !ran {
		t.Fatalf("Claim after a failure: claimed=%v ran=%v, want both true", claimed, ran)
	}
}

func testFnPanicLeavesKeyFree(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	func() {
		defer func() {
			if r := recover(); r != "handler panic" {
				t.Fatalf("recovered %v, want the panic of fn to propagate", r)
			}
		}()
		_, _ = s.Claim(ctx, "job-1", func(context.Context) error { panic("handler panic") })
	}()
	claimed, ran := claim(ctx, t, s, "job-1", nil)
	if !claimed || !ran {
		t.Fatalf("Claim after a panic: claimed=%v ran=%v, want both true", claimed, ran)
	}
}

type ctxKey struct{}

func testFnSeesCallerContext(t *testing.T, s idempotency.Store) {
	ctx := context.WithValue(ctxWithLimit(t), ctxKey{}, "caller")
	var got any
	if _, err := s.Claim(ctx, "job-1", func(ctx context.Context) error {
		got = ctx.Value(ctxKey{})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != "caller" {
		t.Fatalf("fn's context lacks the caller's values: got %v", got)
	}
}

func testEmptyKeyIsRejected(t *testing.T, s idempotency.Store) {
	ran := false
	_, err := s.Claim(ctxWithLimit(t), "", func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, idempotency.ErrEmptyKey) || ran {
		t.Fatalf("Claim(\"\"): err=%v ran=%v, want ErrEmptyKey without running fn", err, ran)
	}
}

func testKeysAreIndependent(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	keys := []string{"a", "a/b", "A", "a ", "grüße/Ω/1", "group/topic/topic/0/42"}
	for _, k := range keys {
		if claimed, ran := claim(ctx, t, s, k, nil); !claimed || !ran {
			t.Fatalf("Claim(%q): claimed=%v ran=%v, want both true", k, claimed, ran)
		}
	}
	for _, k := range keys {
		if claimed, ran := claim(ctx, t, s, k, nil); claimed || ran {
			t.Fatalf("Claim(%q) again: claimed=%v ran=%v, want both false", k, claimed, ran)
		}
	}
}

// concurrentClaims claims key from n goroutines at once, with fn failing
// for the first failures runs, and returns how many runs succeeded and how
// many calls reported a claim.
func concurrentClaims(t *testing.T, s idempotency.Store, key string, n int, failures int32) (succeeded, claims int32) {
	ctx := ctxWithLimit(t)
	var (
		runs, running, overlap atomic.Int32
		ok, claimedN           atomic.Int32
		start                  = make(chan struct{})
		wg                     sync.WaitGroup
	)
	errc := make(chan error, n)
	for range n {
		wg.Go(func() {
			<-start
			claimed, err := s.Claim(ctx, key, func(context.Context) error {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				time.Sleep(20 * time.Millisecond)
				if runs.Add(1) <= failures {
					return errFail
				}
				ok.Add(1)
				return nil
			})
			if err != nil && !errors.Is(err, errFail) {
				errc <- err
			}
			if claimed {
				claimedN.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("concurrent Claim(%q): %v", key, err)
	}
	if overlap.Load() > 0 {
		t.Errorf("fn ran concurrently for one key %d times", overlap.Load())
	}
	return ok.Load(), claimedN.Load()
}

var errFail = errors.New("storetest: planned failure")

func testConcurrentClaimsRunOnce(t *testing.T, s idempotency.Store) {
	succeeded, claims := concurrentClaims(t, s, "job-1", 20, 0)
	if succeeded != 1 || claims != 1 {
		t.Fatalf("20 concurrent claims of one key: fn succeeded %d times, %d claims; want 1 and 1", succeeded, claims)
	}
}

func testConcurrentClaimsAfterFailure(t *testing.T, s idempotency.Store) {
	succeeded, claims := concurrentClaims(t, s, "job-1", 10, 2)
	if succeeded != 1 || claims != 1 {
		t.Fatalf("10 concurrent claims, first 2 runs failing: fn succeeded %d times, %d claims; want 1 and 1", succeeded, claims)
	}
}

func testDistinctKeysRunInParallel(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	const n = 4
	var (
		entered sync.WaitGroup
		wg      sync.WaitGroup
	)
	entered.Add(n)
	all := make(chan struct{})
	go func() { entered.Wait(); close(all) }()
	errc := make(chan error, n)
	for i := range n {
		key := string(rune('a' + i))
		wg.Go(func() {
			_, err := s.Claim(ctx, key, func(ctx context.Context) error {
				entered.Done()
				select {
				case <-all:
					return nil
				case <-ctx.Done():
					return errors.New("claims of distinct keys did not run at the same time")
				}
			})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func testWaitingClaimHonoursContext(t *testing.T, s idempotency.Store) {
	ctx := ctxWithLimit(t)
	inFn, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.Claim(ctx, "job-1", func(context.Context) error {
			close(inFn)
			<-release
			return nil
		})
		first <- err
	}()
	select {
	case <-inFn:
	case <-ctx.Done():
		t.Fatal("first claim did not run fn")
	}

	waitCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	ran := false
	_, err := s.Claim(waitCtx, "job-1", func(context.Context) error { ran = true; return nil })
	if err == nil || ran {
		t.Errorf("Claim behind a claim in progress with an expiring context: err=%v ran=%v, want an error without running fn", err, ran)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Claim took %v to give up after its context expired", d)
	}

	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if claimed, ran := claim(ctx, t, s, "job-1", nil); claimed || ran {
		t.Fatalf("Claim after the first committed: claimed=%v ran=%v, want both false", claimed, ran)
	}
}

func testSweepRemovesOldClaimsOnly(t *testing.T, s idempotency.Store) {
	sw, ok := s.(idempotency.Sweeper)
	if !ok {
		t.Skipf("%T does not implement idempotency.Sweeper", s)
	}
	ctx := ctxWithLimit(t)
	claim(ctx, t, s, "old-1", nil)
	claim(ctx, t, s, "old-2", nil)
	time.Sleep(50 * time.Millisecond)
	cut := time.Now()
	time.Sleep(50 * time.Millisecond)
	claim(ctx, t, s, "new", nil)

	if n, err := sw.Sweep(ctx, cut.Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("Sweep(an hour before the claims) = %d, %v; want 0, nil", n, err)
	}
	if n, err := sw.Sweep(ctx, cut); err != nil || n != 2 {
		t.Fatalf("Sweep(between the claims) = %d, %v; want 2, nil", n, err)
	}
	if claimed, ran := claim(ctx, t, s, "old-1", nil); !claimed || !ran {
		t.Fatalf("Claim of a swept key: claimed=%v ran=%v, want both true", claimed, ran)
	}
	if claimed, ran := claim(ctx, t, s, "new", nil); claimed || ran {
		t.Fatalf("Claim of a key newer than the sweep: claimed=%v ran=%v, want both false", claimed, ran)
	}
	if n, err := sw.Sweep(ctx, cut); err != nil || n != 0 {
		t.Fatalf("second Sweep(between the claims) = %d, %v; want 0, nil", n, err)
	}
}
