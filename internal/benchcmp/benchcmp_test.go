package benchcmp

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestAlternateRunsBothSidesInTurn(t *testing.T) {
	t.Parallel()
	var a, b atomic.Int64
	var turns []string // the side of each chunk, in order
	last := ""
	side := func(name string, n *atomic.Int64) func() error {
		return func() error {
			n.Add(1)
			if name != last { // one goroutine: par 1
				turns, last = append(turns, name), name
			}
			return nil
		}
	}
	ra, rb, err := Alternate(450, 1, side("a", &a), side("b", &b))
	if err != nil {
		t.Fatal(err)
	}
	if a.Load() != 250 || b.Load() != 200 || ra <= 0 || rb <= 0 {
		t.Fatalf("a %d, b %d operations (rates %v, %v); want 250 and 200", a.Load(), b.Load(), ra, rb)
	}
	if len(turns) != 5 {
		t.Fatalf("turns %v, want 5 chunks of at most %d", turns, interleaveChunk)
	}
}

func TestAlternateStopsAtAnError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var n atomic.Int64
	_, _, err := Alternate(1000, 4, func() error { return nil }, func() error {
		n.Add(1)
		return boom
	})
	if !errors.Is(err, boom) || n.Load() > 4 {
		t.Fatalf("err %v after %d failing operations; want boom after at most 4", err, n.Load())
	}
}
