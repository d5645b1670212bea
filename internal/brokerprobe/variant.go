package brokerprobe

import (
	"fmt"
	"slices"
)

// AckFn says how the probe acknowledges an offset it acquired, by the
// delivery count the broker gave: 1 accept, 2 release, 3 reject, 0 hold
// (no ack: its lock runs out).
type AckFn func(offset int64, deliveries int16) int8

// Variant is one way of driving a share partition through a broker kill.
type Variant struct {
	Name    string
	About   string
	Batches []int // the log batches produced before the first fetch, by record count
	Held    func(off int64) bool
	Kill    bool         // SIGKILL and restart the broker after the first acks
	After   func() AckFn // the acks after the restart (or, without Kill, after the first acks)
	Expect  string       // the verdict the code read expects: STALLED or OK
}

// Accept accepts every offset.
func Accept(int64, int16) int8 { return 1 }

// Always returns fn for every run.
func Always(fn AckFn) func() AckFn { return func() AckFn { return fn } }

// FirstTime acks offset off with typ the first time it comes (0: no
// ack), and accepts everything else.
func FirstTime(off int64, typ int8) func() AckFn {
	return func() AckFn {
		seen := false
		return func(o int64, _ int16) int8 {
			if o == off && !seen {
				seen = true
				return typ
			}
			return 1
		}
	}
}

// Variants are the probe's variants at share.partition.max.record.locks
// locks.
func Variants(locks int) []Variant {
	singles := func(n int) []int { return slices.Repeat([]int{1}, n) }
	tens := slices.Repeat([]int{10}, (locks+100)/10)
	first := func(off int64) bool { return off < 10 }
	return []Variant{
		{
			Name:    "big-batch",
			About:   fmt.Sprintf("10 one-record batches then one of %d: the first fetch acquires the big batch whole, past the limit; offsets 0-4 held at the kill, all accepted after it", locks*3+90),
			Batches: append(singles(10), locks*3+90),
			Held:    func(off int64) bool { return off < 5 },
			Kill:    true, After: Always(Accept), Expect: "STALLED",
		},
		{
			Name:    "big-batch-no-kill",
			About:   "big-batch without the kill (control)",
			Batches: append(singles(10), locks*3+90),
			Held:    func(off int64) bool { return off < 5 },
			After:   Always(Accept), Expect: "OK",
		},
		{
			Name:    "full-accept",
			About:   "batches of 10, the in-flight range exactly at the limit at the kill, the first batch (0-9) held; all accepted after the restart (control)",
			Batches: tens, Held: first, Kill: true, After: Always(Accept), Expect: "OK",
		},
		{
			Name:    "full-release-first",
			About:   "as full-accept, but after the restart offset 0 of the re-delivered gap is released (1-9 accepted) and accepted when acquired again",
			Batches: tens, Held: first, Kill: true, Expect: "STALLED",
			After: FirstTime(0, 2),
		},
		{
			Name:    "full-timeout-first",
			About:   "as full-release-first, but offset 0 is left unacked until its lock runs out, then acquired again and accepted",
			Batches: tens, Held: first, Kill: true, Expect: "STALLED",
			After: FirstTime(0, 0),
		},
		{
			Name:    "full-release-mid",
			About:   "as full-release-first, but offset 5 is released instead of 0 (control: the start offset moves to 5)",
			Batches: tens, Held: first, Kill: true, Expect: "OK",
			After: FirstTime(5, 2),
		},
	}
}

// VariantNames are the names of the variants.
func VariantNames() []string {
	var names []string
	for _, v := range Variants(100) {
		names = append(names, v.Name)
	}
	return names
}

// VariantNamed returns the variant called name at locks.
func VariantNamed(name string, locks int) (Variant, bool) {
	all := Variants(locks)
	i := slices.IndexFunc(all, func(v Variant) bool { return v.Name == name })
	if i < 0 {
		return Variant{}, false
	}
	return all[i], true
}
