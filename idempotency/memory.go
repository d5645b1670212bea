package idempotency

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

var (
	_ Store      = (*MemoryStore)(nil)
	_ BatchStore = (*MemoryStore)(nil)
	_ Sweeper    = (*MemoryStore)(nil)
)

// MemoryStore is a [Store] that keeps claims in memory, for development and
// tests. It is safe for concurrent use. The zero value is not usable; call
// [NewMemoryStore].
//
// It is not transactional: fn's effects are whatever fn did, and nothing is
// undone when fn fails. What it does guarantee is the claim's ordering: a
// key is recorded only after fn returned nil, and two concurrent claims of
// one key never both run fn (the second waits for the first and then sees
// the key claimed, or runs fn itself if the first failed). Claims live as
// long as the store and are not shared between processes, so a restarted or
// second worker runs jobs again. The context passed to fn carries no
// transaction: [Tx] returns nil in it.
type MemoryStore struct {
	mu       sync.Mutex
	claimed  map[string]time.Time
	inflight map[string]chan struct{}
}

// NewMemoryStore returns an empty [MemoryStore].
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{
		claimed:  make(map[string]time.Time),
		inflight: make(map[string]chan struct{}),
	}
}

// Claim claims key and runs fn, as described on [Store]. A call that finds
// key's claim in progress waits for it, or returns ctx's error when ctx is
// done first. It returns [ErrEmptyKey] for an empty key.
func (s *MemoryStore) Claim(ctx context.Context, key string, fn func(ctx context.Context) error) (bool, error) {
	if key == "" {
		return false, ErrEmptyKey
	}
	done, err := s.take(ctx, key)
	if err != nil || done == nil {
		return false, err
	}
	ok := false
	defer func() {
		// Runs when fn returns or panics: record the key only on success,
		// and wake the claims waiting on this one.
		s.finish(key, done, ok)
	}()
	if err := fn(ctx); err != nil {
		return false, err
	}
	ok = true
	return true, nil
}

// ClaimBatch claims keys and runs fn once for the free ones, as described
// on [BatchStore]. It takes the keys one at a time, in sorted order (so
// that two batches that share keys never wait for each other both),
// waiting for a claim in progress as Claim does. fn's effects are whatever fn did: a key is recorded only once fn
// returned nil for it.
func (s *MemoryStore) ClaimBatch(ctx context.Context, keys []string, fn func(ctx context.Context, free []int) []error) ([]ClaimResult, error) {
	if err := checkBatchKeys(keys); err != nil {
		return nil, err
	}
	results := make([]ClaimResult, len(keys))
	var free []int
	dones := make([]chan struct{}, len(keys))
	oks := make([]bool, len(keys))
	defer func() {
		for k, done := range dones {
			if done != nil {
				s.finish(keys[k], done, oks[k])
			}
		}
	}()
	for _, k := range byKey(keys) {
		done, err := s.take(ctx, keys[k])
		if err != nil {
			return nil, err
		}
		if dones[k] = done; done != nil {
			free = append(free, k)
		}
	}
	slices.Sort(free)
	if len(free) == 0 {
		return results, nil
	}
	errs := fn(ctx, free)
	if len(errs) != len(free) {
		return nil, fmt.Errorf("idempotency: memory store: the batch function returned %d errors for %d keys", len(errs), len(free))
	}
	for n, k := range free {
		results[k] = ClaimResult{Claimed: errs[n] == nil, Err: errs[n]}
		oks[k] = errs[n] == nil
	}
	return results, nil
}

// byKey returns the indexes of keys in the order of the keys.
func byKey(keys []string) []int {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	return order
}

// checkBatchKeys returns an error for an empty key or one given twice.
func checkBatchKeys(keys []string) error {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("idempotency: claim a batch: %w", ErrEmptyKey)
		}
		if seen[k] {
			return fmt.Errorf("idempotency: claim a batch: key %q given twice", k)
		}
		seen[k] = true
	}
	return nil
}

// take marks key's claim in progress and returns the channel that
// [MemoryStore.finish] closes, or nil when key is already claimed. It
// waits for a claim of key in progress, or for ctx.
func (s *MemoryStore) take(ctx context.Context, key string) (chan struct{}, error) {
	for {
		s.mu.Lock()
		if _, ok := s.claimed[key]; ok {
			s.mu.Unlock()
			return nil, nil
		}
		wait, ok := s.inflight[key]
		if !ok {
			done := make(chan struct{})
			s.inflight[key] = done
			s.mu.Unlock()
			return done, nil
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("idempotency: memory store: wait for claim %q: %w", key, context.Cause(ctx))
		}
	}
}

// finish ends the claim of key that take began: it records key when ok,
// and wakes the claims waiting on it.
func (s *MemoryStore) finish(key string, done chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
	if ok {
		s.claimed[key] = time.Now()
	}
	close(done)
}

// Sweep deletes the claims made before olderThan and returns how many it
// deleted. Claims in progress are not affected.
func (s *MemoryStore) Sweep(ctx context.Context, olderThan time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, at := range s.claimed {
		if at.Before(olderThan) {
			delete(s.claimed, k)
			n++
		}
	}
	return n, nil
}

// Claimed reports whether key is claimed: a claim of it ran to completion
// and has not been swept. It is meant for tests.
func (s *MemoryStore) Claimed(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.claimed[key]
	return ok
}
