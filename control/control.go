// Package control is the fleet-wide state an operator sets for shareq
// workers at run time: which topics of which groups are paused, and the
// rate and key limits that replace the ones their code declares; each
// with why and by whom.
//
// The state lives in one compacted Kafka topic ([DefaultTopic]), so it
// needs nothing but Kafka, survives the loss of any process (the broker
// keeps it, replicated as the topic is), and is read the same way by
// workers, the CLI (`shareq pause|resume|pauses|limit|limits`) and the
// console. Each pause and each limit is one record keyed by its kind,
// group and topic; a resume (or a limit cleared) is that key's
// tombstone. A worker reads the topic to its end before it fetches (a
// worker started while a pause is on starts paused) and then follows it
// with one long-polling fetch, which answers as soon as a record is
// written: a change reaches every worker of the group within a fetch
// round trip. A new topic rate takes effect on every worker at once, a
// moment after it is written ([RateSwitch]), so that no two workers run
// different rates.
//
// A worker that cannot read the topic keeps the state it last read and
// says so once in its log; docs/operating.md has the whole story.
package control

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultTopic is the control topic's name unless [Topic] says another.
const DefaultTopic = "shareq.controls"

// ErrNoTopic is returned when the control topic does not exist (create
// it with [Client.EnsureTopic] or `shareq topics create`).
var ErrNoTopic = errors.New("control: the control topic does not exist")

// A Pause stops a group's workers from fetching and starting the jobs of
// one topic, or of every topic when Topic is empty, until it is resumed.
type Pause struct {
	// Group is the share group whose workers pause.
	Group string `json:"group"`
	// Topic is the paused topic; empty pauses the whole group.
	Topic string `json:"topic,omitempty"`
	// Reason says why, for whoever looks at the pause later.
	Reason string `json:"reason"`
	// By says who paused: a person or a system.
	By string `json:"by"`
	// At is when the pause was written; [Client.Pause] sets it when zero.
	At time.Time `json:"at"`
}

// Whole reports whether p pauses every topic of its group.
func (p Pause) Whole() bool { return p.Topic == "" }

// String is p as one line: "group g topic t paused by b at …: reason".
func (p Pause) String() string {
	what := "group " + p.Group
	if !p.Whole() {
		what += " topic " + p.Topic
	}
	return fmt.Sprintf("%s paused by %s at %s: %s", what, p.By, p.At.UTC().Format(time.RFC3339), p.Reason)
}

// validate says what is missing from p.
func (p Pause) validate() error {
	var missing []string
	if p.Group == "" {
		missing = append(missing, "Group (the share group whose workers pause)")
	}
	if strings.TrimSpace(p.Reason) == "" {
		missing = append(missing, "Reason (why, for whoever looks at the pause later)")
	}
	if strings.TrimSpace(p.By) == "" {
		missing = append(missing, "By (who pauses: a person or a system)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("control: a pause needs %s", strings.Join(missing, ", "))
	}
	return nil
}

// State is the control topic's content at one point: every pause in
// force, sorted by group and topic (a whole-group pause first), and every
// limit set, sorted the same way.
type State struct {
	Pauses []Pause
	Limits []Limit
}

// Paused returns the pause that stops topic of group, if any: the whole
// group's pause before the topic's own.
func (s State) Paused(group, topic string) (Pause, bool) {
	var own Pause
	found := false
	for _, p := range s.Pauses {
		if p.Group != group {
			continue
		}
		if p.Whole() {
			return p, true
		}
		if p.Topic == topic {
			own, found = p, true
		}
	}
	return own, found
}

// Of returns the pauses of group, in State order.
func (s State) Of(group string) []Pause {
	var out []Pause
	for _, p := range s.Pauses {
		if p.Group == group {
			out = append(out, p)
		}
	}
	return out
}

// Equal reports whether s and o hold the same pauses and limits.
func (s State) Equal(o State) bool {
	return slices.EqualFunc(s.Pauses, o.Pauses, func(a, b Pause) bool {
		return a.Group == b.Group && a.Topic == b.Topic && a.Reason == b.Reason && a.By == b.By && a.At.Equal(b.At)
	}) && slices.EqualFunc(s.Limits, o.Limits, Limit.equal)
}

// record kinds, the first element of a record's key.
const (
	kindPause = "pause"
	kindLimit = "limit"
)

// key is the record key of a control entry: a JSON array of its kind,
// group and topic, so that no group or topic name can make two entries
// share a key.
func key(kind, group, topic string) []byte {
	b, _ := json.Marshal([]string{kind, group, topic})
	return b
}

// parseKey splits a record key made by key.
func parseKey(b []byte) (kind, group, topic string, ok bool) {
	var parts []string
	if json.Unmarshal(b, &parts) != nil || len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// entries is the state being read: the last value of each key.
type entries struct {
	pauses map[string]Pause
	limits map[string]Limit
}

func newEntries() *entries {
	return &entries{pauses: map[string]Pause{}, limits: map[string]Limit{}}
}

// apply takes one record into e; it reports whether e changed. Records
// of kinds this version does not know are skipped, as are values it
// cannot read (a newer writer's).
func (e *entries) apply(r *kgo.Record) bool {
	kind, group, topic, ok := parseKey(r.Key)
	if !ok {
		return false
	}
	switch kind {
	case kindPause:
		return put(e.pauses, r, func(p *Pause) { p.Group, p.Topic = group, topic })
	case kindLimit:
		return put(e.limits, r, func(l *Limit) { l.Group, l.Topic = group, topic })
	}
	return false
}

// put applies r to m: its value decoded, named by the key (set), or a
// tombstone's removal. It reports whether m changed.
func put[V any](m map[string]V, r *kgo.Record, set func(*V)) bool {
	k := string(r.Key)
	if r.Value == nil {
		_, had := m[k]
		delete(m, k)
		return had
	}
	var v V
	if json.Unmarshal(r.Value, &v) != nil {
		return false
	}
	set(&v) // the key decides what the entry is about
	m[k] = v
	return true
}

// state is e as a State.
func (e *entries) state() State {
	s := State{Pauses: make([]Pause, 0, len(e.pauses)), Limits: make([]Limit, 0, len(e.limits))}
	for _, p := range e.pauses {
		s.Pauses = append(s.Pauses, p)
	}
	for _, l := range e.limits {
		s.Limits = append(s.Limits, l)
	}
	slices.SortFunc(s.Pauses, func(a, b Pause) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic))
	})
	slices.SortFunc(s.Limits, func(a, b Limit) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic))
	})
	return s
}
