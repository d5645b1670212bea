package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
)

// ClaimBatch claims keys in one transaction and runs fn once with the keys
// it claimed, as described on [idempotency.BatchStore] (idempotency.Batch
// calls it for a batch handler's jobs): it begins, inserts every key with
// ON CONFLICT DO NOTHING in one statement (in sorted order, so that two
// batches that share keys do not deadlock), calls fn with the transaction
// in its context (see [Tx]) and the indexes of the keys it inserted,
// deletes the claims of the keys fn failed, and commits. A key claimed by
// an unfinished transaction makes the insert wait for it, as for
// [Store.Claim].
//
// fn's writes for a job it fails commit with the others: write only the
// rows of the jobs that succeed, or give each job a savepoint (tx.Begin on
// [Tx]'s transaction) and roll it back when the job fails. A statement of
// fn's that fails outside a savepoint aborts the transaction; fn then
// fails every job, or the commit fails them all.
//
// The batch takes one connection, within the claim slots the store keeps
// on a pool (see the package documentation). Errors are as for Claim: a
// failure because Postgres is unreachable, failing over or silent is a
// [handler.UnavailableError]; a commit that fails, whatever its outcome,
// is an error for the whole batch.
func (s *Store) ClaimBatch(ctx context.Context, keys []string, fn func(ctx context.Context, free []int) []error) (results []idempotency.ClaimResult, err error) {
	if err := checkKeys(keys); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("claim a batch of %d keys", len(keys))
	tx, release, err := s.begin(ctx, what)
	if err != nil {
		return nil, err
	}
	defer release() // after the rollback below
	done := false
	defer func() {
		if !done {
			rollback(ctx, tx)
		}
	}()
	results, free, err := s.claimKeys(ctx, tx, what, keys)
	if err != nil || len(free) == 0 {
		return results, err
	}
	errs := fn(idempotency.WithTx(ctx, watchedTx{Tx: tx, s: s}), free)
	if len(errs) != len(free) {
		return nil, fmt.Errorf("pgstore: %s: the batch function returned %d errors for %d keys", what, len(errs), len(free))
	}
	var failed []string
	for n, k := range free {
		results[k] = idempotency.ClaimResult{Claimed: errs[n] == nil, Err: errs[n]}
		if errs[n] != nil {
			failed = append(failed, keys[k])
		}
	}
	if len(failed) == len(free) {
		// Nothing to commit: the rollback undoes every claim. Jobs that
		// failed because the connection died failed for an outage.
		if err := unavailable(ctx, tx, errs[0]); handler.IsUnavailable(err) && !handler.IsUnavailable(errs[0]) {
			return nil, fmt.Errorf("pgstore: %s: %w", what, err)
		}
		return results, nil
	}
	if err := s.unclaim(ctx, tx, what, failed); err != nil {
		return nil, err
	}
	done = true
	if err := s.bounded(ctx, "COMMIT", tx.Commit); err != nil {
		return nil, unavailable(ctx, tx, fmt.Errorf("pgstore: %s: commit: %w", what, err))
	}
	return results, nil
}

// claimKeys inserts keys in tx and returns a result for each (the taken
// ones final: claimed before, or cancelled) and the indexes of the keys
// it inserted, in increasing order.
func (s *Store) claimKeys(ctx context.Context, tx pgx.Tx, what string, keys []string) ([]idempotency.ClaimResult, []int, error) {
	inserted, err := s.queryKeys(ctx, tx, "the batch's INSERT", s.claimBatchSQL, keys)
	if err != nil {
		return nil, nil, unavailable(ctx, tx, fmt.Errorf("pgstore: %s: %w", what, s.explain(err)))
	}
	results := make([]idempotency.ClaimResult, len(keys))
	var free []int
	var taken []string
	for k, key := range keys {
		if inserted[key] {
			free = append(free, k)
		} else {
			taken = append(taken, key)
		}
	}
	if len(taken) == 0 {
		return results, free, nil
	}
	// Taken: by runs, or by cancels. The insert waited for the
	// transactions that wrote those rows, so this statement (read
	// committed) sees them; a row swept since reads as a run's.
	cancelled, err := s.queryKeys(ctx, tx, "the batch's SELECT", s.takenSQL, taken)
	if err != nil {
		return nil, nil, unavailable(ctx, tx, fmt.Errorf("pgstore: %s: %w", what, s.explain(err)))
	}
	for k, key := range keys {
		if cancelled[key] {
			results[k].Err = fmt.Errorf("pgstore: claim %q: %w", key, idempotency.ErrCancelled)
		}
	}
	return results, free, nil
}

// queryKeys runs sql, a statement that returns keys, with keys as its
// argument, [Store.watched], and returns the keys it returned.
func (s *Store) queryKeys(ctx context.Context, tx pgx.Tx, what, sql string, keys []string) (map[string]bool, error) {
	got := make(map[string]bool, len(keys))
	err := s.watched(ctx, what, func(ctx context.Context) error {
		rows, err := tx.Query(ctx, sql, keys)
		if err != nil {
			return err
		}
		var key string
		_, err = pgx.ForEachRow(rows, []any{&key}, func() error {
			got[key] = true
			return nil
		})
		return err
	})
	return got, err
}

// unclaim deletes the claims of keys in tx, for the jobs that failed.
func (s *Store) unclaim(ctx context.Context, tx pgx.Tx, what string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	err := s.watched(ctx, "the batch's DELETE", func(ctx context.Context) error {
		_, err := tx.Exec(ctx, s.unclaimSQL, keys)
		return err
	})
	if err != nil {
		return unavailable(ctx, tx, fmt.Errorf("pgstore: %s: undo the claims of %d failed jobs: %w", what, len(keys), s.explain(err)))
	}
	return nil
}

// checkKeys returns an error for a batch with an empty key or a key given
// twice.
func checkKeys(keys []string) error {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("pgstore: claim a batch: %w", idempotency.ErrEmptyKey)
		}
		if seen[k] {
			return fmt.Errorf("pgstore: claim a batch: key %q given twice: the keys of a batch must be distinct", k)
		}
		seen[k] = true
	}
	return nil
}
