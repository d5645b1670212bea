package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shareq/shareq/idempotency/pgstore"
)

// claimWithin runs s.Claim of key and fails t unless it returned within
// bound; fn runs in the claim.
func claimWithin(t *testing.T, s *pgstore.Store, key string, bound time.Duration, fn func(ctx context.Context) error) (bool, error, time.Duration) {
	t.Helper()
	// The job's context is far longer than the bound: what ends the
	// claim is the store's timeout, not the caller's.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	ok, err := s.Claim(ctx, key, fn)
	took := time.Since(start)
	if took > bound {
		t.Fatalf("Claim(%s) took %v, want at most %v: %v", key, took, bound, err)
	}
	return ok, err, took
}

func wantSilent(t *testing.T, what string, err error) {
	t.Helper()
	wantUnavailable(t, what, err)
	if !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("%s: %v, want it to say Postgres did not answer", what, err)
	}
}

// A network to Postgres that goes silent (nothing passes, nothing is
// closed) makes a claim unavailable within StatementTimeout (twice it
// for a statement that may wait on a lock: the probe), not at the end of
// the job's context, so the worker pauses instead of spending the job's
// delivery; a lock wait and a slow statement of the handler, with
// Postgres answering, are not mistaken for one.
func TestClaimThroughSilentPostgresIsUnavailable(t *testing.T) {
	t.Parallel()
	const d = 500 * time.Millisecond
	// Loose: d or 2d, plus pgx's deadline delay of a cancelled statement
	// and a busy machine; a hang would last the context's 2 minutes.
	const bound = 20 * d
	s, px, direct := proxied(t, pgstore.StatementTimeout(d))
	claims := func(key string) int {
		return count(t, direct, "SELECT count(*) FROM shareq_processed_jobs WHERE key = $1", key)
	}
	if _, err, _ := claimWithin(t, s, "warm", bound, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("claim before the silence: %v", err)
	}

	px.Silence()
	_, err, took := claimWithin(t, s, "begin-silent", bound, func(context.Context) error { return errors.New("must not run") })
	wantSilent(t, "begin through a silent network", err)
	t.Logf("begin through a silent network: unavailable after %v (StatementTimeout %v)", took.Round(time.Millisecond), d)
	px.Resume()

	_, err, took = claimWithin(t, s, "handler-silent", bound, func(ctx context.Context) error {
		if _, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		px.Silence()
		_, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1")
		return err
	})
	wantSilent(t, "handler's statement through a silent network", err)
	t.Logf("handler's statement through a silent network: unavailable after %v (StatementTimeout %v, then the probe's)", took.Round(time.Millisecond), d)
	px.Resume()

	_, err, _ = claimWithin(t, s, "commit-silent", bound, func(ctx context.Context) error {
		if _, err := pgstore.Tx(ctx).Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		px.Silence()
		return nil
	})
	wantSilent(t, "commit through a silent network", err)
	px.Resume()

	// Postgres answers: a claim that waits 3d for a concurrent claim of
	// its key, and a handler statement of 3d, both complete.
	holder, err := direct.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key) VALUES ('locked')"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(3 * d) // the concurrent claim's handler, running
		_ = holder.Rollback(context.Background())
	}()
	ok, err, took := claimWithin(t, s, "locked", bound, func(context.Context) error { return nil })
	if err != nil || !ok {
		t.Fatalf("claim waiting %v for a concurrent claim: %v, %v; want claimed", 3*d, ok, err)
	}
	if took < 3*d {
		t.Fatalf("claim of a key held by another transaction returned after %v, before it ended (%v)", took, 3*d)
	}
	ok, err, _ = claimWithin(t, s, "slow", bound, func(ctx context.Context) error {
		var v int
		return pgstore.Tx(ctx).QueryRow(ctx, "SELECT 1 FROM pg_sleep($1)", (3 * d).Seconds()).Scan(&v)
	})
	if err != nil || !ok {
		t.Fatalf("handler statement of %v: %v, %v; want claimed", 3*d, ok, err)
	}

	// Nothing was claimed by the abandoned claims but the commit, whose
	// outcome is unknown (the COMMIT, held by the silent network, may
	// have reached Postgres after it came back); every key claims now
	// or is claimed.
	for _, k := range []string{"begin-silent", "handler-silent"} {
		if n := claims(k); n != 0 {
			t.Fatalf("%s: %d claim rows, want 0", k, n)
		}
	}
	for _, k := range []string{"begin-silent", "handler-silent", "commit-silent"} {
		ok, err, _ := claimWithin(t, s, k, bound, func(context.Context) error { return nil })
		if err != nil {
			t.Fatalf("Claim(%s) after the silence: %v", k, err)
		}
		if !ok && k != "commit-silent" {
			t.Fatalf("Claim(%s) after the silence: not claimed, want claimed", k)
		}
	}
}
