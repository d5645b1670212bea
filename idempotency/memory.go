package idempotency

import (
	"context"
	"fmt"
	"sync"
	"time"
)

var (
	_ Store   = (*MemoryStore)(nil)
	_ Sweeper = (*MemoryStore)(nil)
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
	var done chan struct{}
	for done == nil {
		s.mu.Lock()
		if _, ok := s.claimed[key]; ok {
			s.mu.Unlock()
			return false, nil
		}
		if wait, ok := s.inflight[key]; ok {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("idempotency: memory store: wait for claim %q: %w", key, context.Cause(ctx))
			}
		}
		done = make(chan struct{})
		s.inflight[key] = done
		s.mu.Unlock()
	}

	ok := false
	defer func() {
		// Runs when fn returns or panics: record the key only on success,
		// and wake the claims waiting on this one.
		s.mu.Lock()
		delete(s.inflight, key)
		if ok {
			s.claimed[key] = time.Now()
		}
		close(done)
		s.mu.Unlock()
	}()
	if err := fn(ctx); err != nil {
		return false, err
	}
	ok = true
	return true, nil
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
