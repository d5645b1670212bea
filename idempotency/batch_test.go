package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
)

// batchJobs returns jobs with job IDs ids, on topic images of group thumbs.
func batchJobs(ids ...string) []*handler.Job {
	jobs := make([]*handler.Job, len(ids))
	for i, id := range ids {
		jobs[i] = job(jobID(id))
	}
	return jobs
}

// batchRecorder is a batch function that records the job IDs of each
// call and fails the jobs it is told to.
type batchRecorder struct {
	mu    sync.Mutex
	calls [][]string
	fail  map[string]error
}

func (r *batchRecorder) run(_ context.Context, jobs []*handler.Job) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		ids = append(ids, j.ID())
		errs[i] = r.fail[j.ID()]
	}
	r.calls = append(r.calls, ids)
	return errs
}

func mustBatch(t *testing.T, s idempotency.BatchStore, fn handler.BatchFunc, opts ...idempotency.Option) handler.BatchFunc {
	t.Helper()
	b, err := idempotency.Batch(s, fn, opts...)
	if err != nil {
		t.Fatalf("Batch: %v", err)
	}
	return b
}

// Jobs already claimed succeed without running, as duplicates; the others
// run in one call; a job that fails keeps its error unchanged and its key
// free, so its next delivery runs it (alone); the others are claimed.
func TestBatchOutcomesPerJob(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemoryStore()
	key := func(id string) string { return idempotency.Key("thumbs", "images", id) }
	if _, err := s.Claim(t.Context(), key("done"), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("deadlock detected")
	bad := handler.Permanent(errors.New("bad row"))
	r := &batchRecorder{fail: map[string]error{"b": boom, "c": bad}}
	var dups []string
	fn := mustBatch(t, s, r.run, idempotency.OnDuplicate(func(j *handler.Job, _ string) { dups = append(dups, j.ID()) }))

	errs := fn(t.Context(), batchJobs("a", "done", "b", "c", "d"))
	if want := []error{nil, nil, boom, bad, nil}; !slices.Equal(errs, want) {
		t.Fatalf("outcomes %v, want %v", errs, want)
	}
	if got := fmt.Sprint(r.calls); got != "[[a b c d]]" {
		t.Errorf("batch function calls %s, want [[a b c d]] (done claimed before)", got)
	}
	if fmt.Sprint(dups) != "[done]" {
		t.Errorf("OnDuplicate told of %v, want [done]", dups)
	}
	for id, claimed := range map[string]bool{"a": true, "d": true, "b": false, "c": false} {
		if s.Claimed(key(id)) != claimed {
			t.Errorf("key of %s claimed = %v, want %v", id, !claimed, claimed)
		}
	}

	// The failed jobs' next deliveries: they run, alone.
	r.fail = nil
	if errs := fn(t.Context(), batchJobs("b", "a")); !slices.Equal(errs, []error{nil, nil}) {
		t.Fatalf("retry outcomes %v, want success", errs)
	}
	if got := fmt.Sprint(r.calls[1:]); got != "[[b]]" {
		t.Errorf("retry calls %s, want [[b]] (a claimed before)", got)
	}
}

// Two jobs of a batch with one key (a producer's duplicate copy) run
// once: the copy shares the first one's outcome, as a duplicate when it
// succeeded.
func TestBatchCopiesOfOneJob(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", fail), func(t *testing.T) {
			t.Parallel()
			boom := errors.New("boom")
			r := &batchRecorder{}
			if fail {
				r.fail = map[string]error{"a": boom}
			}
			dups := 0
			fn := mustBatch(t, idempotency.NewMemoryStore(), r.run, idempotency.OnDuplicate(func(*handler.Job, string) { dups++ }))
			errs := fn(t.Context(), batchJobs("a", "x", "a"))
			if got := fmt.Sprint(r.calls); got != "[[a x]]" {
				t.Errorf("calls %s, want [[a x]]", got)
			}
			want, wantDups := []error{nil, nil, nil}, 1
			if fail {
				want, wantDups = []error{boom, nil, boom}, 0
			}
			if !slices.Equal(errs, want) || dups != wantDups {
				t.Errorf("outcomes %v, duplicates %d; want %v, %d", errs, dups, want, wantDups)
			}
		})
	}
}

// A job whose key cannot be derived fails permanently alone; the others
// run.
func TestBatchEmptyKeyIsPermanent(t *testing.T) {
	t.Parallel()
	r := &batchRecorder{}
	keyOf := func(j *handler.Job) string {
		if j.ID() == "nokey" {
			return ""
		}
		return j.ID()
	}
	errs := mustBatch(t, idempotency.NewMemoryStore(), r.run, idempotency.KeyFunc(keyOf))(t.Context(), batchJobs("a", "nokey"))
	if errs[0] != nil || !handler.IsPermanent(errs[1]) || !errors.Is(errs[1], idempotency.ErrEmptyKey) {
		t.Errorf("outcomes %v, want nil and a permanent ErrEmptyKey", errs)
	}
	if got := fmt.Sprint(r.calls); got != "[[a]]" {
		t.Errorf("calls %s, want [[a]]", got)
	}
}

// brokenBatchStore fails every batch with err, without running fn.
type brokenBatchStore struct{ err error }

func (s brokenBatchStore) ClaimBatch(context.Context, []string, func(context.Context, []int) []error) ([]idempotency.ClaimResult, error) {
	return nil, s.err
}

// A store that fails the batch (its begin, a claim, its commit) fails
// every job: a retry with reason ReasonStore, or the store's
// UnavailableError when it is down, so the worker pauses.
func TestBatchStoreFailureFailsEveryJob(t *testing.T) {
	t.Parallel()
	lost := errors.New("unexpected EOF during COMMIT")
	r := &batchRecorder{}
	for _, err := range mustBatch(t, brokenBatchStore{lost}, r.run)(t.Context(), batchJobs("a", "b")) {
		var retry *handler.RetryError
		if !errors.As(err, &retry) || retry.Reason != idempotency.ReasonStore || !errors.Is(err, lost) {
			t.Errorf("outcome %v, want a RetryError with reason %q wrapping the store's error", err, idempotency.ReasonStore)
		}
	}
	down := handler.Unavailable("db", errors.New("connection refused"))
	for _, err := range mustBatch(t, brokenBatchStore{down}, r.run)(t.Context(), batchJobs("a", "b")) {
		if handler.ReasonOf(err) != handler.ReasonUnavailable {
			t.Errorf("outcome %v, want the store's UnavailableError", err)
		}
	}
}

// A batch function that returns the wrong number of outcomes fails every
// job it got, and claims none.
func TestBatchWrongNumberOfOutcomes(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemoryStore()
	fn := mustBatch(t, s, func(context.Context, []*handler.Job) []error { return nil })
	for _, err := range fn(t.Context(), batchJobs("a", "b")) {
		if err == nil || handler.IsPermanent(err) {
			t.Errorf("outcome %v, want an error that retries", err)
		}
	}
	if s.Claimed(idempotency.Key("thumbs", "images", "a")) {
		t.Error("a job of a batch whose outcomes were miscounted was claimed")
	}
}

// Batch checks its arguments as Middleware does.
func TestBatchArguments(t *testing.T) {
	t.Parallel()
	r := &batchRecorder{}
	if _, err := idempotency.Batch(nil, r.run); !errors.Is(err, idempotency.ErrNilStore) {
		t.Errorf("Batch(nil store) = %v, want ErrNilStore", err)
	}
	if _, err := idempotency.Batch(idempotency.NewMemoryStore(), nil); err == nil {
		t.Error("Batch(nil fn): no error")
	}
	if _, err := idempotency.Batch(idempotency.NewMemoryStore(), r.run, idempotency.KeyFunc(nil)); err == nil {
		t.Error("Batch(KeyFunc(nil)): no error")
	}
}
