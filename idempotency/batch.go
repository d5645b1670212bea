package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/shareq/shareq/handler"
)

// A BatchStore claims the keys of a batch of jobs in one transaction, for
// [Batch]. The pgstore store and [MemoryStore] implement it.
// Implementations must be safe for concurrent use.
//
// ClaimBatch claims keys together and runs fn once for the keys it
// claimed, recording each claim atomically with fn's effects:
//
//   - It begins one transaction and claims every key in it. A key already
//     claimed (its run committed before) is [ClaimResult]{} and a key that
//     holds a cancel is {Err: [ErrCancelled]}; neither is passed to fn.
//   - It calls fn once, with a context that carries the transaction (see
//     [Tx]) and free, the indexes in keys of the keys it claimed, in
//     increasing order; fn returns one error per index of free. Without a
//     free key, fn is not called.
//   - It undoes the claims of the keys whose error is not nil, in the
//     transaction, so that they stay free, and commits: a key whose error
//     is nil is {Claimed: true}, a key whose error is not is {Err: that
//     error}, unchanged. fn's writes for a failed key are fn's to leave
//     out (they commit with the others).
//   - The store fails (begin, a claim, the undoing or the commit), or fn
//     returns a slice of the wrong length: ClaimBatch returns (nil, err)
//     and no claim of the batch lasts, or, for a commit whose outcome is
//     unknown, all of them do with fn's effects; claiming the keys again
//     is safe either way. A store that can tell it is down returns a
//     [handler.UnavailableError], as for [Store.Claim].
//   - fn panics: the transaction rolls back, every key stays free, and the
//     panic continues.
//
// A key whose claim is in progress in another call (of Claim or
// ClaimBatch) makes ClaimBatch wait for that call to end, or for ctx to be
// done (returning ctx's error). keys are distinct, and each is a key as
// [Store] describes; ClaimBatch returns an error without claiming any for
// an empty key or a key given twice.
type BatchStore interface {
	ClaimBatch(ctx context.Context, keys []string, fn func(ctx context.Context, free []int) []error) ([]ClaimResult, error)
}

// ClaimResult is what [BatchStore.ClaimBatch] did with one key: what
// [Store.Claim] returns for a key claimed alone.
type ClaimResult struct {
	// Claimed is true when the key was free, its job succeeded and the
	// claim committed.
	Claimed bool
	// Err is the job's error from fn (the claim undone), or ErrCancelled
	// for a key that holds a cancel; nil when Claimed, or when the key was
	// claimed before (a duplicate).
	Err error
}

// Batch returns fn wrapped in claims made by store, for [handler.Batch]:
// the jobs of a batch are claimed together, in one transaction that fn
// writes its effects through (found with [Tx], or pgstore.Tx), and each
// job's outcome is the one [Middleware] gives a job alone:
//
//   - a job whose key was claimed before is not passed to fn and
//     succeeds (a duplicate: [OnDuplicate] is told); a job whose key
//     holds a cancel is not passed to fn and is cancelled
//     ([handler.CancelledError]).
//   - fn runs once with the other jobs; a job that fn fails has its claim
//     undone before the commit, so it retries alone (or is parked, for a
//     [handler.Permanent] error) and its next delivery claims it again;
//     the jobs that fn succeeds commit with their claims.
//   - the store fails, or the commit does: every job of the batch fails
//     with [handler.Retry] and reason [ReasonStore] (or the store's
//     [handler.UnavailableError], which pauses the worker), and they all
//     run again.
//   - two jobs of a batch with one key: the second is not passed to fn
//     and shares the first one's outcome (a duplicate when it succeeds).
//
// fn must not write, in the transaction, the effects of a job it fails:
// they would commit with the other jobs while the job runs again. Write
// only the rows of the jobs that succeed, or put each job's statements in
// a savepoint of its own (pgx: tx.Begin on the claim's transaction) and
// roll it back when the job fails. A statement that fails without a
// savepoint aborts the transaction: return an error for every job, and
// the batch retries.
//
// A batch holds one transaction, and one connection with pgstore, from
// its first claim to its commit: a worker with Concurrency c and batches
// of n holds about c/n of them, where [Middleware] on each job of the
// batch would hold c. [Middleware]'s options apply ([KeyFunc],
// [KeyPrefix], [OnDuplicate]). Batch returns [ErrNilStore] for a nil
// store and an error for a nil fn or an invalid option.
func Batch(store BatchStore, fn handler.BatchFunc, opts ...Option) (handler.BatchFunc, error) {
	c, err := newConfig(store == nil, opts)
	if fn == nil {
		err = errors.Join(err, errors.New("idempotency: Batch: nil batch function"))
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, jobs []*handler.Job) []error {
		return c.handleBatch(ctx, store, fn, jobs)
	}, nil
}

// batchClaim is one batch on its way through a [BatchStore]: its jobs'
// keys, and where each job's outcome comes from.
type batchClaim struct {
	jobs []*handler.Job
	errs []error  // each job's outcome; a job's key error is set early
	keys []string // distinct keys, in the order of their first job
	at   []int    // at[k]: the first job of keys[k]
	same []int    // same[i]: the index in keys of job i's key; -1 when it has none
	ran  []bool   // ran[k]: keys[k]'s job was passed to fn
}

// newBatchClaim derives the keys of jobs: a job whose key cannot be
// derived fails permanently, as with [Middleware].
func (c *config) newBatchClaim(jobs []*handler.Job) *batchClaim {
	b := &batchClaim{jobs: jobs, errs: make([]error, len(jobs)), same: make([]int, len(jobs))}
	index := make(map[string]int, len(jobs))
	for i, job := range jobs {
		b.same[i] = -1
		key, err := c.key(job)
		if err != nil {
			b.errs[i] = handler.Permanent(err)
			continue
		}
		k, ok := index[key]
		if !ok {
			k = len(b.keys)
			index[key] = k
			b.keys, b.at = append(b.keys, key), append(b.at, i)
		}
		b.same[i] = k
	}
	b.ran = make([]bool, len(b.keys))
	return b
}

// run is the function ClaimBatch calls: fn on the jobs of the free keys.
func (b *batchClaim) run(fn handler.BatchFunc) func(ctx context.Context, free []int) []error {
	return func(ctx context.Context, free []int) []error {
		jobs := make([]*handler.Job, len(free))
		for n, k := range free {
			b.ran[k] = true
			jobs[n] = b.jobs[b.at[k]]
		}
		errs := fn(ctx, jobs)
		if len(errs) != len(jobs) {
			err := fmt.Errorf("idempotency: Batch: the batch function returned %d outcomes for %d jobs", len(errs), len(jobs))
			errs = make([]error, len(jobs))
			for n := range errs {
				errs[n] = err
			}
		}
		return errs
	}
}

func (c *config) handleBatch(ctx context.Context, store BatchStore, fn handler.BatchFunc, jobs []*handler.Job) []error {
	b := c.newBatchClaim(jobs)
	if len(b.keys) == 0 {
		return b.errs
	}
	results, err := store.ClaimBatch(ctx, b.keys, b.run(fn))
	if err == nil && len(results) != len(b.keys) {
		err = fmt.Errorf("the store returned %d results for %d keys", len(results), len(b.keys))
	}
	for i, k := range b.same {
		switch {
		case k < 0:
		case err != nil:
			b.errs[i] = batchStoreError(len(b.keys), err)
		case i == b.at[k]:
			b.errs[i] = c.outcome(b.jobs[i], b.keys[k], b.ran[k], results[k])
		default: // a copy of job b.at[k], which decided before it
			b.errs[i] = b.errs[b.at[k]]
			if b.errs[i] == nil && c.onDuplicate != nil {
				c.onDuplicate(b.jobs[i], b.keys[k])
			}
		}
	}
	return b.errs
}

// batchStoreError is every job's outcome when the store failed the batch.
func batchStoreError(keys int, err error) error {
	err = fmt.Errorf("idempotency: claim a batch of %d keys: %w", keys, err)
	if handler.IsUnavailable(err) {
		return err
	}
	return handler.Retry(ReasonStore, err)
}

// outcome is a job's outcome from the result of its key; ran tells
// whether the job (or the first of the batch with its key) was passed to
// fn.
func (c *config) outcome(job *handler.Job, key string, ran bool, r ClaimResult) error {
	switch {
	case ran && r.Err != nil:
		return r.Err
	case !ran && errors.Is(r.Err, ErrCancelled):
		return handler.Cancelled(fmt.Errorf("idempotency: claim %q: %w", key, r.Err))
	case r.Err != nil:
		return handler.Retry(ReasonStore, fmt.Errorf("idempotency: claim %q: %w", key, r.Err))
	case ran && !r.Claimed:
		return handler.Retry(ReasonStore, fmt.Errorf("idempotency: claim %q: store ran the batch function but reported no claim", key))
	case !ran && r.Claimed:
		return handler.Retry(ReasonStore, fmt.Errorf("idempotency: claim %q: store reported a claim but did not run the batch function for it", key))
	case !ran && c.onDuplicate != nil:
		c.onDuplicate(job, key)
	}
	return nil
}
