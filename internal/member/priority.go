package member

// Priorities between topics at the fetch (Config.Priority).
//
// A share session fetches every partition it holds, and the broker fills
// a fetch from them in its own order (Kafka starts each fetch one
// partition further on), so the mix a fetch brings is even whatever the
// topics' priorities. The member orders the fetch by which topics it
// asks for: a topic left out of the sessions (gated) is forgotten by
// them, like a paused one, and its records in hand stay held, renewable
// and ackable (their acks go in ShareAcknowledge requests, not on the
// fetches). Each answered fetch may change the topics asked for; a
// change costs the next fetch the partitions it adds and forgets.
//
// Strict: the fetches ask for the classes of topics from the most urgent
// down to the first that delivered records. A fetch that acquires records
// of a class above that one drops the classes below it at once; a fetch
// that acquires nothing adds the next class. So while an urgent topic has
// records, nothing of a lower one is acquired, and at the end of its
// burst the lower topics wait one empty fetch (up to Config.MaxWait).
// While a lower class delivers, the broker's rotation over the session's
// partitions would find an urgent record only once a fetch starts at its
// partition (several fetches later), and a worker whose slots are all
// busy fetches nothing until one frees; so every probeEvery, when no
// fetch is in flight, the member probes: a fetch of the more urgent
// classes alone, with no wait, for up to probeRecords even past the
// credit (a debt the executor repays, as for whole batches), so that the
// urgent records are in hand when the next slots free. The fetch after it
// asks for the lower class again unless the probe acquired records.
//
// Weighted: each fetch asks for one topic with records (the one whose
// records acquired, divided by its weight, are fewest), plus the topics
// whose last fetch came back empty, so that their new records are seen.
// A topic whose fetch came back empty leaves the rotation until it
// delivers again.

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// probeEvery is how often, at most, strict order probes the more urgent
// classes while a lower one delivers: about the time an urgent record
// waits to be found, for a ShareFetch without wait each time.
const probeEvery = 20 * time.Millisecond

// probeRecords is how many records a probe may fetch past the credit: a
// burst of urgent records in hand at once starts as slots free, rather
// than a fetch round trip per slot.
const probeRecords = 64

// probeWhile is how long after the lower class last delivered strict
// order goes on probing: past it the fetches of every class long-poll,
// and find an urgent record as soon as it comes.
const probeWhile = time.Second

// Priority orders the topics a member's fetches ask for.
type Priority struct {
	// Strict names topics, the most urgent first; the topics not named
	// come after them, as one class. Empty: Weights.
	Strict []string
	// Weights weighs topics (1 when absent): under a backlog of several,
	// the records fetched of each follow their weights.
	Weights map[string]int
}

// check validates p against the subscribed topics.
func (p *Priority) check(topics []string) error {
	if len(p.Strict) > 0 && len(p.Weights) > 0 {
		return fmt.Errorf("member: Config.Priority has both Strict and Weights; give one")
	}
	for _, t := range p.Strict {
		if !slices.Contains(topics, t) {
			return fmt.Errorf("member: Config.Priority.Strict names %q, not in Config.Topics", t)
		}
	}
	for t, w := range p.Weights {
		if !slices.Contains(topics, t) {
			return fmt.Errorf("member: Config.Priority.Weights names %q, not in Config.Topics", t)
		}
		if w < 1 {
			return fmt.Errorf("member: Config.Priority.Weights[%q] is %d; weights are 1 or more", t, w)
		}
	}
	return nil
}

// fetchPriority is the state of Config.Priority. Owned by Run's
// goroutine; nil: no priorities, every fetch asks for every topic.
type fetchPriority struct {
	strict bool
	gated  map[string]bool // the topics left out of the fetches now
	gen    uint64          // counts the changes of gated

	// Strict.
	classes [][]string     // most urgent first; none empty
	classOf map[string]int // topic → its class
	level   int            // the least urgent class fetched
	// probing: the next fetch asks only for the classes above level
	// (probeEvery); lastProbe is when the last probe began.
	probing   bool
	lastProbe time.Time
	lastLower time.Time // when a fetch last brought records of class level (and none above)

	// Weighted.
	topics []string           // sorted
	weight map[string]int     // 1 when absent
	served map[string]float64 // records acquired / weight
	live   map[string]bool    // the topic's last fetch acquired records of it
	chosen string             // the topic the fetches ask for now; "": all
}

// newFetchPriority returns the state for p over topics; nil for nil.
func newFetchPriority(p *Priority, topics []string) *fetchPriority {
	if p == nil {
		return nil
	}
	f := &fetchPriority{gated: map[string]bool{}}
	if len(p.Strict) > 0 {
		f.strict = true
		f.classOf = map[string]int{}
		for _, t := range p.Strict {
			f.classOf[t] = len(f.classes)
			f.classes = append(f.classes, []string{t})
		}
		var rest []string
		for _, t := range topics {
			if _, ok := f.classOf[t]; !ok {
				f.classOf[t] = len(f.classes)
				rest = append(rest, t)
			}
		}
		if len(rest) > 0 {
			f.classes = append(f.classes, rest)
		}
		f.setLevel(0)
		return f
	}
	f.topics = slices.Sorted(slices.Values(topics))
	f.weight, f.served, f.live = map[string]int{}, map[string]float64{}, map[string]bool{}
	for _, t := range f.topics {
		f.weight[t] = max(1, p.Weights[t])
		f.live[t] = true
	}
	f.choose()
	return f
}

// gates reports whether topic is left out of the fetches now.
func (f *fetchPriority) gates(topic string) bool { return f != nil && f.gated[topic] }

// fetched takes the answer, at now, of a fetch sent at gen that asked
// for records and acquired got (records by topic), and reports whether
// the topics to fetch changed.
func (f *fetchPriority) fetched(gen uint64, got map[string]int, now time.Time) bool {
	if f.strict {
		return f.fetchedStrict(gen, got, now)
	}
	return f.fetchedWeighted(gen, got)
}

func (f *fetchPriority) fetchedStrict(gen uint64, got map[string]int, now time.Time) bool {
	top := len(f.classes) // the most urgent class that acquired records
	for t, n := range got {
		if n > 0 {
			top = min(top, f.classOf[t])
		}
	}
	current := gen == f.gen // sent with the topics asked for now
	if top == f.level {
		f.lastLower = now
	}
	switch {
	case top < f.level: // a more urgent class has records: the lower ones wait
		f.setLevel(top)
	case f.probing && current: // the probe found nothing: the lower class again
		f.setLevel(f.level)
	case top == len(f.classes) && current && f.level < len(f.classes)-1: // nothing: one class more
		f.setLevel(f.level + 1)
	default:
		return false
	}
	return true
}

// setLevel fetches the classes down to level.
func (f *fetchPriority) setLevel(level int) {
	f.level, f.probing = level, false
	f.gate(level + 1)
}

// probe has the next fetch ask only for the classes above level.
func (f *fetchPriority) probe(now time.Time) {
	f.probing, f.lastProbe = true, now
	f.gate(f.level)
}

// probeDue returns when the next probe is due; zero: none (not strict,
// probing already, the most urgent class fetched alone, or the lower
// class has not delivered for probeWhile).
func (f *fetchPriority) probeDue(now time.Time) time.Time {
	if f == nil || !f.strict || f.probing || f.level == 0 || now.Sub(f.lastLower) > probeWhile {
		return time.Time{}
	}
	return f.lastProbe.Add(probeEvery)
}

// unstick asks for more topics when those asked for have no partition
// here, so that no fetch can be sent: a probe ends, strict order adds the
// next class, weights take the chosen topic out of the rotation. It
// reports whether anything changed; false once every topic is asked for.
func (f *fetchPriority) unstick() bool {
	switch {
	case f == nil || len(f.gated) == 0:
		return false
	case f.strict && f.probing:
		f.setLevel(f.level)
	case f.strict:
		f.setLevel(f.level + 1)
	default:
		f.live[f.chosen] = false
		f.choose()
		f.gen++
	}
	return true
}

// gate leaves the classes from class on out of the fetches.
func (f *fetchPriority) gate(class int) {
	clear(f.gated)
	for _, c := range f.classes[class:] {
		for _, t := range c {
			f.gated[t] = true
		}
	}
	f.gen++
}

func (f *fetchPriority) fetchedWeighted(gen uint64, got map[string]int) bool {
	floor, any := 0.0, false // the least served of the topics live before
	for _, t := range f.topics {
		if f.live[t] && (!any || f.served[t] < floor) {
			floor, any = f.served[t], true
		}
	}
	for t, n := range got {
		if n == 0 {
			continue
		}
		if !f.live[t] {
			// Back with records: it starts level with the others, not
			// owed the share it did not use.
			f.live[t] = true
			f.served[t] = max(f.served[t], floor)
		}
		f.served[t] += float64(n) / float64(f.weight[t])
	}
	if gen == f.gen && f.chosen != "" && total(got) == 0 {
		f.live[f.chosen] = false // asked for, it had nothing (nor had the others asked)
	}
	before := maps.Clone(f.gated)
	f.choose()
	if maps.Equal(before, f.gated) {
		return false
	}
	f.gen++
	return true
}

// total returns the records acquired of every topic.
func total(got map[string]int) int {
	n := 0
	for _, c := range got {
		n += c
	}
	return n
}

// choose picks the live topic least served for its weight and gates the
// other live ones; with none live, it gates none.
func (f *fetchPriority) choose() {
	f.chosen = ""
	for _, t := range f.topics {
		if f.live[t] && (f.chosen == "" || f.served[t] < f.served[f.chosen]) {
			f.chosen = t
		}
	}
	clear(f.gated)
	for _, t := range f.topics {
		if f.live[t] && t != f.chosen {
			f.gated[t] = true
		}
	}
}

// probeUrgent starts a probe (fetchPriority.probeDue) if one is due and
// no fetch is in flight.
func (m *Member) probeUrgent(now time.Time) {
	due := m.prio.probeDue(now)
	if due.IsZero() || now.Before(due) || !m.canFetch() || m.fetching() {
		return
	}
	m.prio.probe(now)
	m.replan()
}

// prioritize takes the answer of a fetch sent at gen that acquired got
// (records by topic) and replans if the topics to fetch changed.
func (m *Member) prioritize(gen uint64, got map[string]int) {
	now := time.Now()
	if !m.prio.fetched(gen, got, now) {
		return
	}
	m.replan()
}
