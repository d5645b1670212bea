package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) idempotency.Store { return idempotency.NewMemoryStore() })
}

func TestMemoryStoreClaimed(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemoryStore()
	ctx := t.Context()
	if s.Claimed("k") {
		t.Fatal("empty store reports k claimed")
	}
	_, _ = s.Claim(ctx, "k", func(context.Context) error { return errors.New("fail") })
	if s.Claimed("k") {
		t.Fatal("k claimed after fn failed")
	}
	if _, err := s.Claim(ctx, "k", func(ctx context.Context) error {
		if s.Claimed("k") {
			t.Error("k claimed while fn is still running")
		}
		if tx := idempotency.Tx(ctx); tx != nil {
			t.Errorf("MemoryStore put a transaction in fn's context: %v", tx)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !s.Claimed("k") {
		t.Fatal("k not claimed after fn succeeded")
	}
}

func TestMemoryStoreSweepHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := idempotency.NewMemoryStore().Sweep(ctx, time.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestTxRoundTrip(t *testing.T) {
	t.Parallel()
	if tx := idempotency.Tx(t.Context()); tx != nil {
		t.Fatalf("Tx of a bare context = %v, want nil", tx)
	}
	type fakeTx struct{ id int }
	tx := &fakeTx{id: 7}
	if got := idempotency.Tx(idempotency.WithTx(t.Context(), tx)); got != tx {
		t.Fatalf("Tx(WithTx(ctx, tx)) = %v, want %v", got, tx)
	}
}
