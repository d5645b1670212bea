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
// yields, also while the loop deletes and puts back.
func TestKeyMapAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	topics := []string{"a", "b"}
	key := func() Key {
		// Topic strings built anew each time, so that a partition's
		// name is equal but not the same string as the last lookup's.
		return Key{string([]byte(topics[rng.IntN(2)])), rng.Int32N(3), rng.Int64N(50)}
	}
	var km KeyMap[int]
	want := map[Key]int{}
	check := func(step int) {
		t.Helper()
		if km.Len() != len(want) {
			t.Fatalf("step %d: Len %d, want %d", step, km.Len(), len(want))
		}
		got := maps.Collect(km.All())
		if !maps.Equal(got, want) {
			t.Fatalf("step %d: All yields %v, want %v", step, got, want)
		}
	}
	for step := range 5000 {
		k := key()
		switch rng.IntN(3) {
		case 0:
			km.Put(k, step)
			want[k] = step
		case 1:
			km.Delete(k)
			delete(want, k)
		}
		if got, w := km.Get(k), want[k]; got != w {
			t.Fatalf("step %d: Get(%v) = %d, want %d", step, k, got, w)
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)

	// Deleting every other key and putting one back while ranging.
	for k := range km.All() {
		if k.Offset%2 == 0 {
			km.Delete(k)
			delete(want, k)
		}
	}
	check(-2)
	for k := range km.All() {
		km.Delete(k)
		delete(want, k)
	}
	check(-3)
	if km.Get(Key{"a", 0, 1}) != 0 || km.Get(Key{"never", 9, 9}) != 0 {
		t.Fatal("Get of a missing key is not the zero value")
	}
	km.Delete(Key{"never", 9, 9}) // no table: nothing to do
	check(-4)
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
