package jobctx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/jobctx"
)

// A worker's mark reaches derived contexts and nothing else.
func TestInWorker(t *testing.T) {
	t.Parallel()
	if jobctx.InWorker(context.Background()) {
		t.Fatal("a bare context is a worker's")
	}
	ctx, cancel := context.WithCancel(jobctx.WithWorker(context.Background()))
	defer cancel()
	if !jobctx.InWorker(ctx) {
		t.Fatal("a context derived from WithWorker is not a worker's")
	}
}

// WillPark tells middleware inside a dead-letter middleware which
// failures it parks: permanent ones always, any other but a dependency
// down on a delivery it parks on; nothing outside it.
func TestWillPark(t *testing.T) {
	t.Parallel()
	perm, plain := handler.Permanent(errors.New("404")), errors.New("503")
	down := handler.Unavailable("postgres", errors.New("refused"))
	bare := context.Background()
	if jobctx.WillPark(bare, perm) {
		t.Fatal("a park expected with no dead-letter middleware around")
	}
	some := jobctx.WithParker(bare, false)
	if !jobctx.WillPark(some, perm) || jobctx.WillPark(some, plain) || jobctx.WillPark(some, nil) {
		t.Fatal("not the last delivery: want only the permanent failure parked")
	}
	all, cancel := context.WithCancel(jobctx.WithParker(bare, true))
	defer cancel()
	if !jobctx.WillPark(all, plain) || !jobctx.WillPark(all, perm) || jobctx.WillPark(all, down) {
		t.Fatal("the last delivery: want any failure but a dependency down parked")
	}
}

// Held: what the worker holds on its delivery is never parked on the
// last one — a dependency down, a snooze, and a key's destination down
// where the job has a key breaker (elsewhere it is an ordinary failure).
func TestHeldIsNotParked(t *testing.T) {
	t.Parallel()
	snooze := handler.Snooze(time.Minute)
	keyDown := handler.KeyUnavailable(errors.New("refused"))
	last := jobctx.WithParker(context.Background(), true)
	keyed := jobctx.WithKeyBreaker(last)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		park bool
	}{
		{"snooze", last, snooze, false},
		{"wrapped snooze", last, fmt.Errorf("later: %w", snooze), false},
		{"key down with a breaker", keyed, keyDown, false},
		{"key down without one", last, keyDown, true},
		{"plain failure with a breaker", keyed, errors.New("500"), true},
	} {
		if got := jobctx.WillPark(tc.ctx, tc.err); got != tc.park {
			t.Errorf("%s: WillPark %v; want %v", tc.name, got, tc.park)
		}
	}
}
