package idempotency

import (
	"context"
	"errors"
	"time"
)

// ErrEmptyKey is returned by [MemoryStore.Claim] (and the pgstore store)
// for an empty key. [Middleware] returns it, wrapped in
// [handler.Permanent], when a [KeyFunc] yields an empty key: retrying
// would derive the same key.
var ErrEmptyKey = errors.New("idempotency: empty key")

// ErrCancelled is returned by a [Store]'s Claim, without calling fn, when
// the key holds a cancel rather than a claim of a run: the job was
// cancelled before it ran (pgoutbox.CancelTx with pgoutbox.ClaimKey writes
// such a key into pgstore's table). [Middleware] turns it into an ACCEPT
// without running the handler, reported by the worker as cancelled (it
// returns a [*handler.CancelledError] that wraps ErrCancelled).
var ErrCancelled = errors.New("idempotency: job cancelled")

// ErrNilStore is returned by [Middleware] when it is given a nil [Store].
var ErrNilStore = errors.New("idempotency: nil store")

// A Store claims job keys. Implementations must be safe for concurrent use.
//
// Claim runs fn at most once per key, counting only runs that succeeded,
// and records the key atomically with fn's effects:
//
//   - The key is free: Claim calls fn with a context that carries the
//     store's transaction (see [Tx]; nil for a store that has none). When
//     fn returns nil and the claim commits, Claim returns (true, nil).
//   - The key is already claimed: Claim returns (false, nil) without
//     calling fn.
//   - The key holds a cancel (a store that records cancels, as pgstore
//     does): Claim returns (false, [ErrCancelled]) without calling fn.
//   - fn returns an error: the transaction rolls back, the key stays free,
//     and Claim returns (false, that error) unchanged, so that errors.Is
//     and errors.As see through it.
//   - The store fails (begin, insert or commit): Claim returns (false, err).
//     A store that can tell that it is down, rather than that one
//     statement failed, returns a [handler.UnavailableError] (also in
//     place of fn's error when fn failed because the store's connection
//     died, wrapping it), so that the worker pauses.
//     If fn had returned nil and the commit failed with an unknown outcome,
//     the claim and fn's effects were either both committed or both rolled
//     back; calling Claim again for the key is safe either way.
//   - fn panics: the transaction rolls back, the key stays free, and the
//     panic continues.
//
// A Claim for a key whose claim is in progress in another call waits for
// that call to finish (or for ctx to be done, returning ctx's error) and
// then behaves as above.
//
// Keys handed to a Store by [Middleware] are non-empty, valid UTF-8
// without NUL bytes, and at most [MaxKeyLen] bytes long.
//
// Claim is a transaction-scoped operation rather than a pair of "seen?"
// and "mark" calls because a separate mark can be lost after the side
// effect (a crash between the two) or recorded before it (a crash after
// the mark), and either breaks exactly-once. With one transaction, the
// side effects and the claim commit together.
type Store interface {
	Claim(ctx context.Context, key string, fn func(ctx context.Context) error) (claimed bool, err error)
}

// A Sweeper removes old claims, for retention. [MemoryStore] and the
// pgstore store implement it. It is a separate interface so that a Store
// backed by storage with its own expiry (a key-value store's TTL) need not
// pretend to sweep.
type Sweeper interface {
	// Sweep deletes the claims made before olderThan and returns how many
	// it deleted. A deleted key can be claimed again, so keep claims longer
	// than a job can be delivered again (at least the topic's retention).
	Sweep(ctx context.Context, olderThan time.Time) (deleted int64, err error)
}

type txKey struct{}

// WithTx returns a copy of ctx that carries tx, the transaction a claim
// runs in. [Store] implementations call it for the context they pass to
// fn; handlers read it back with [Tx] or a store's typed accessor (such as
// pgstore.Tx).
func WithTx(ctx context.Context, tx any) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// Tx returns the transaction of the claim that ctx runs in, or nil when
// there is none: the handler was not wrapped in [Middleware], or its store
// has no transactions ([MemoryStore]). Its dynamic type is the store's
// (pgx.Tx for pgstore, whose pgstore.Tx returns it typed).
func Tx(ctx context.Context) any {
	return ctx.Value(txKey{})
}
