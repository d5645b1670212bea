package member

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeyMapAgreesWithAMap puts, gets and deletes random keys of a few
// partitions of two topics in a KeyMap and in a Go map keyed by Key, and
// checks that they agree throughout: values, length, and the keys All
// yields, also while the loop deletes. The offsets are drawn as a
// partition's keys in hand go: mostly near a cursor that moves up (the
// window), some far behind it (long jobs), some jumps far ahead (the
// window starting again), and a few random ones.
func TestKeyMapAgreesWithAMap(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		rng := rand.New(rand.NewPCG(seed, 2))
		topics := []string{"a", "b"}
		cursor := map[int32]int64{}
		key := func() Key {
			// Topic strings built anew each time, so that a partition's
			// name is equal but not the same string as the last lookup's.
			p := rng.Int32N(3)
			off := cursor[p]
			switch r := rng.IntN(100); {
			case r < 70:
				off += rng.Int64N(40) - 10
				cursor[p] += rng.Int64N(3)
			case r < 85:
				off -= 100 + rng.Int64N(2000) // behind
			case r < 90:
				cursor[p] += 1000 + rng.Int64N(5000) // a jump ahead
				off = cursor[p]
			default:
				off = rng.Int64N(50)
			}
			return Key{string([]byte(topics[rng.IntN(2)])), p, off}
		}
		var km KeyMap[int]
		want := map[Key]int{}
		check := func(step int) {
			t.Helper()
			if km.Len() != len(want) {
				t.Fatalf("seed %d, step %d: Len %d, want %d", seed, step, km.Len(), len(want))
			}
			got := maps.Collect(km.All())
			if !maps.Equal(got, want) {
				t.Fatalf("seed %d, step %d: All yields %d keys, want %d (or other values)", seed, step, len(got), len(want))
			}
		}
		var keys []Key
		for step := range 20000 {
			k := key()
			if len(keys) > 0 && rng.IntN(3) == 0 {
				k = keys[rng.IntN(len(keys))] // a key put before
			}
			switch rng.IntN(3) {
			case 0, 1:
				km.Put(k, step+1)
				want[k] = step + 1
				keys = append(keys, k)
			case 2:
				km.Delete(k)
				delete(want, k)
			}
			if got, w := km.Get(k), want[k]; got != w {
				t.Fatalf("seed %d, step %d: Get(%v) = %d, want %d", seed, step, k, got, w)
			}
			if step%500 == 0 {
				check(step)
			}
		}
		check(-1)
		for k := range want {
			if got := km.Get(k); got != want[k] {
				t.Fatalf("seed %d: Get(%v) = %d, want %d", seed, k, got, want[k])
			}
		}

		// Deleting every other key, and others than the one yielded,
		// while ranging.
		for k := range km.All() {
			if k.Offset%2 == 0 {
				km.Delete(k)
				delete(want, k)
			}
			o := k
			o.Offset += 3
			km.Delete(o)
			delete(want, o)
		}
		check(-2)
		km.Put(keys[0], 0) // the zero value deletes
		delete(want, keys[0])
		check(-3)
		for k := range km.All() {
			km.Delete(k)
			delete(want, k)
		}
		check(-4)
		if km.Get(Key{"a", 0, 1}) != 0 || km.Get(Key{"never", 9, 9}) != 0 {
			t.Fatal("Get of a missing key is not the zero value")
		}
		km.Delete(Key{"never", 9, 9}) // no table: nothing to do
		check(-5)
	}
}

// TestKeyMapWindowStaysSmall: a partition's keys moving up, one of them
// held far behind, keep a window as wide as the keys in hand (the one
// behind in far), not as wide as the offsets they passed.
func TestKeyMapWindowStaysSmall(t *testing.T) {
	var km KeyMap[int]
	km.Put(Key{"t", 0, 0}, 1) // a long job
	for off := int64(1); off < 1_000_000; off++ {
		km.Put(Key{"t", 0, off}, 1)
		if off > 100 {
			km.Delete(Key{"t", 0, off - 100})
		}
	}
	o := km.part("t", 0, false)
	if km.Len() != 101 || o.len() != 101 {
		t.Fatalf("%d keys (%d in the partition), want 101", km.Len(), o.len())
	}
	if span := int64(len(o.win)); span > windowSpan(o.nwin) {
		t.Fatalf("window spans %d offsets for %d keys", span, o.nwin)
	}
	if c := len(o.buf); c > 4096 {
		t.Fatalf("window's array holds %d slots for %d keys", c, o.nwin)
	}
	if km.Get(Key{"t", 0, 0}) != 1 {
		t.Fatal("the key far behind is lost")
	}
	// The steady flow reuses the window's array: no allocation.
	off := int64(1_000_000)
	if a := testing.AllocsPerRun(10, func() {
		for range 10_000 {
			km.Put(Key{"t", 0, off}, 1)
			km.Delete(Key{"t", 0, off - 100})
			off++
		}
	}); a != 0 {
		t.Fatalf("%v allocations a run of 10,000 keys through", a)
	}
}

// TestPartCountsAgreeWithAMap adds random amounts to the counts of a few
// partitions of two topics and checks them against a map that drops its
// zero entries, as the sessions' counts did.
func TestPartCountsAgreeWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c partCounts
	want := map[tp]int{}
	for step := range 5000 {
		p := tp{string([]byte([]string{"a", "b"}[rng.IntN(2)])), rng.Int32N(3)}
		d := rng.IntN(5) - 2
		got := c.add(p, d)
		if want[p] += d; want[p] == 0 {
			delete(want, p)
		}
		if got != want[p] || c.get(p) != want[p] {
			t.Fatalf("step %d: add(%v, %d) = %d, get %d, want %d", step, p, d, got, c.get(p), want[p])
		}
		if c.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, c.len(), len(want))
		}
	}
	if all := maps.Collect(c.all()); !maps.Equal(all, want) {
		t.Fatalf("all yields %v, want %v", all, want)
	}
}

// TestSortRefsSorts: sortRefs orders distinct offsets ascending, each with
// its entry, whether they lie in a narrow window (placed by offset) or
// spread wide (sorted), and leaves the slots it returns empty for the
// next call.
func TestSortRefsSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var slots []*held
	for round := range 2000 {
		n := rng.IntN(300)
		spread := int64(n + 1 + rng.IntN(8*n+1)) // narrow and wide windows
		if round%10 == 0 {
			spread = 1 << 20 // one offset far behind the others
		}
		base := rng.Int64N(1 << 40)
		seen := map[int64]bool{}
		var rs []ref
		for len(rs) < n {
			off := base + rng.Int64N(spread)
			if seen[off] {
				continue
			}
			seen[off] = true
			rs = append(rs, ref{off, &held{}})
		}
		want := slices.Clone(rs)
		slices.SortFunc(want, func(a, b ref) int { return cmp.Compare(a.off, b.off) })
		slots = sortRefs(rs, slots)
		if !slices.Equal(rs, want) {
			t.Fatalf("round %d: %d offsets over %d sorted wrong", round, n, spread)
		}
		if i := slices.IndexFunc(slots, func(h *held) bool { return h != nil }); i >= 0 {
			t.Fatalf("round %d: slot %d left set", round, i)
		}
	}
}
