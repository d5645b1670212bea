package member

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// gatedOf returns the topics f leaves out of the fetches, sorted.
func gatedOf(f *fetchPriority) string {
	var ts []string
	for t, g := range f.gated {
		if g {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return strings.Join(ts, ",")
}

// Strict order fetches the most urgent class first, adds the next class
// only after a fetch of the current ones came back empty, and drops the
// lower classes as soon as a more urgent one delivers; an empty answer
// to a fetch sent before the last change adds nothing.
func TestStrictFetchPriorityFollowsTheUrgentTopics(t *testing.T) {
	t.Parallel()
	f := newFetchPriority(&Priority{Strict: []string{"a", "b"}}, []string{"c", "b", "a", "d"})
	steps := []struct {
		stale bool
		got   map[string]int
		want  string // the gated topics after
	}{
		{false, nil, "c,d"}, // start: a only → a empty: a, b
		{false, nil, ""},    // b empty too: every topic
		{false, map[string]int{"c": 3}, ""},
		{false, map[string]int{"b": 1, "c": 2}, "c,d"}, // b delivers: c and d wait
		{false, map[string]int{"a": 1}, "b,c,d"},
		{false, map[string]int{"a": 2}, "b,c,d"},
		{true, nil, "b,c,d"}, // a stale empty answer changes nothing
		{false, nil, "c,d"},
	}
	if got := gatedOf(f); got != "b,c,d" {
		t.Fatalf("at the start gated %q, want b,c,d", got)
	}
	for i, s := range steps {
		gen := f.gen
		if s.stale {
			gen--
		}
		f.fetched(gen, s.got, time.Time{})
		if got := gatedOf(f); got != s.want {
			t.Fatalf("step %d (%v): gated %q, want %q", i, s.got, got, s.want)
		}
	}
}

// While a lower class delivers, strict order probes the more urgent
// classes every probeEvery: the probe asks for them alone, and the fetch
// after it asks for the lower class again unless the probe found
// records, which makes their class the one fetched. Once the lower class
// has delivered nothing for probeWhile, no probe is due.
func TestStrictFetchPriorityProbesTheUrgentTopics(t *testing.T) {
	t.Parallel()
	f := newFetchPriority(&Priority{Strict: []string{"a"}}, []string{"a", "b"})
	now := time.Unix(1000, 0)
	if !f.probeDue(now).IsZero() {
		t.Fatal("a probe due with the most urgent class fetched alone")
	}
	f.fetched(f.gen, nil, now) // a empty: a and b
	f.fetched(f.gen, map[string]int{"b": 2}, now)
	if due := f.probeDue(now); due.IsZero() || due.After(now) {
		t.Fatalf("after b delivered: probe due %v, want now", due)
	}
	f.probe(now)
	if gatedOf(f) != "b" || !f.probeDue(now).IsZero() {
		t.Fatalf("probing: gated %q, probe due %v; want a alone, none due", gatedOf(f), f.probeDue(now))
	}
	f.fetched(f.gen, nil, now) // the probe: nothing
	if f.probing || gatedOf(f) != "" {
		t.Fatalf("after an empty probe: probing %v, gated %q; want a and b fetched", f.probing, gatedOf(f))
	}
	if due := f.probeDue(now); !due.Equal(now.Add(probeEvery)) {
		t.Fatalf("next probe due %v, want probeEvery after the last", due)
	}
	f.probe(now.Add(probeEvery))
	f.fetched(f.gen, map[string]int{"a": 1}, now.Add(probeEvery)) // the probe finds a
	if f.probing || gatedOf(f) != "b" || f.level != 0 {
		t.Fatalf("after a probe found records: probing %v, gated %q, level %d; want a alone", f.probing, gatedOf(f), f.level)
	}
	f.fetched(f.gen, nil, now) // a empty again: a and b; b last delivered at now
	if !f.probeDue(now.Add(probeWhile + time.Millisecond)).IsZero() {
		t.Fatal("a probe due after b delivered nothing for probeWhile")
	}
}

// Priorities whose topics asked for have no partition here ask for more
// (unstick), so that the member never stops fetching: strict order adds
// the next class, weights take the chosen topic out of the rotation, and
// with every topic asked for there is nothing more to ask.
func TestFetchPriorityUnsticks(t *testing.T) {
	t.Parallel()
	s := newFetchPriority(&Priority{Strict: []string{"a", "b"}}, []string{"a", "b", "c"})
	for _, want := range []string{"c", ""} {
		if !s.unstick() || gatedOf(s) != want {
			t.Fatalf("strict unstick: gated %q, want %q", gatedOf(s), want)
		}
	}
	if s.unstick() {
		t.Fatal("strict unstick with every topic asked for changed something")
	}
	w := newFetchPriority(&Priority{Weights: map[string]int{"a": 2}}, []string{"a", "b"})
	if w.chosen != "a" || !w.unstick() || w.chosen != "b" || gatedOf(w) != "" {
		t.Fatalf("weighted unstick: chosen %q, gated %q; want b, none", w.chosen, gatedOf(w))
	}
	if w.unstick() {
		t.Fatal("weighted unstick with every topic asked for changed something")
	}
	var none *fetchPriority
	if none.unstick() || none.gates("a") {
		t.Fatal("no priorities gate or unstick something")
	}
}

// Weights choose one topic a fetch, the one with the fewest records
// acquired for its weight, so that the records follow the weights
// whatever each fetch brings; a topic whose fetch came back empty leaves
// the rotation (and is asked beside the chosen one) until it delivers,
// and then starts level with the others.
func TestWeightedFetchPriorityFollowsTheWeights(t *testing.T) {
	t.Parallel()
	f := newFetchPriority(&Priority{Weights: map[string]int{"heavy": 3}}, []string{"light", "heavy"})
	n := map[string]int{}
	for i := range 400 {
		got := map[string]int{f.chosen: 1 + i%5} // fetches of uneven sizes
		n[f.chosen] += got[f.chosen]
		f.fetched(f.gen, got, time.Time{})
	}
	if share := float64(n["heavy"]) / float64(n["heavy"]+n["light"]); share < 0.74 || share > 0.76 {
		t.Errorf("heavy's share of the records %.3f (%v), want 0.75", share, n)
	}
	// light runs dry: asked alone it brings nothing, so heavy alone is
	// chosen and light is asked beside it.
	for f.chosen != "light" {
		f.fetched(f.gen, map[string]int{"heavy": 1}, time.Time{})
	}
	f.fetched(f.gen, nil, time.Time{})
	if f.chosen != "heavy" || gatedOf(f) != "" {
		t.Fatalf("after light's empty fetch: chosen %q, gated %q; want heavy, none", f.chosen, gatedOf(f))
	}
	f.fetched(f.gen, map[string]int{"heavy": 50}, time.Time{})
	// light has records again: back in the rotation, owed nothing.
	f.fetched(f.gen, map[string]int{"light": 1}, time.Time{})
	if !f.live["light"] || f.served["light"] < f.served["heavy"]-1 {
		t.Fatalf("light back: live %v, served %v (heavy %v)", f.live["light"], f.served["light"], f.served["heavy"])
	}
}

// A Priority that names a topic not subscribed, mixes strict order and
// weights, or weighs a topic below 1 is refused.
func TestPriorityChecked(t *testing.T) {
	t.Parallel()
	topics := []string{"a", "b"}
	for _, p := range []*Priority{
		{Strict: []string{"a", "x"}},
		{Weights: map[string]int{"x": 2}},
		{Weights: map[string]int{"a": 0}},
		{Strict: []string{"a"}, Weights: map[string]int{"b": 2}},
	} {
		if err := p.check(topics); err == nil {
			t.Errorf("%+v accepted", *p)
		}
	}
	if err := (&Priority{Strict: []string{"b"}}).check(topics); err != nil {
		t.Errorf("a valid priority refused: %v", err)
	}
}
