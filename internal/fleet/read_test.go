package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
)

func record(t *testing.T, topic string, at time.Time, s fleet.Status) *kgo.Record {
	t.Helper()
	v, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(s.Instance), Value: v, Timestamp: at}
}

func instances(ws []fleet.Status) []string {
	var out []string
	for _, s := range ws {
		out = append(out, s.Instance)
	}
	return out
}

// Read keeps each instance's last status, drops those with a tombstone
// after it, those older than their bound and those written before the
// read window, skips records that are not statuses, and sorts by group
// and name; its LastSeen is the record's timestamp.
func TestReadKeepsLastLiveStatusOfEachInstance(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "workers")
	c.CreateTopicWith(t, topic, 1, fleet.TopicConfigs())
	now := time.Now().Truncate(time.Millisecond)
	every := 5 * time.Second
	st := func(instance, group, name string, running int) fleet.Status {
		return fleet.Status{Instance: instance, Group: group, Name: name, Running: running, Every: every}
	}
	c.Produce(t,
		// Before the window: a live worker has written since.
		record(t, topic, now.Add(-fleet.ReadWindow-time.Minute), st("ancient", "g1", "w0", 0)),
		record(t, topic, now.Add(-4*time.Second), st("a", "g2", "w1", 1)),
		record(t, topic, now.Add(-3*time.Second), st("b", "g1", "w9", 0)),
		record(t, topic, now.Add(-2*time.Second), st("a", "g2", "w1", 2)), // a's last
		record(t, topic, now.Add(-2*time.Second), st("gone", "g1", "w2", 0)),
		&kgo.Record{Topic: topic, Key: []byte("gone"), Timestamp: now.Add(-time.Second)}, // its tombstone
		// Stale: 3 intervals and more old.
		record(t, topic, now.Add(-3*every-time.Second), st("crashed", "g1", "w3", 0)),
		&kgo.Record{Topic: topic, Key: []byte("junk"), Value: []byte("not a status"), Timestamp: now.Add(-time.Second)},
		record(t, topic, now.Add(-time.Second), st("c", "g1", "w4", 0)),
	)
	ws, err := fleet.Read(context.Background(), c.Client(t), topic, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := instances(ws), []string{"c", "b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("%s %s: instances %v, want %v (g1's w4, w9, then g2's w1)", c.Kind, c.Version, got, want)
	}
	if ws[2].Running != 2 || !ws[2].LastSeen.Equal(now.Add(-2*time.Second)) {
		t.Errorf("a: %+v, want its last status (running 2, seen 2s ago)", ws[2])
	}
	if g1 := fleet.OfGroup(ws, "g1"); !slices.Equal(instances(g1), []string{"c", "b"}) {
		t.Errorf("OfGroup g1: %v", instances(g1))
	}
	if age := fleet.Age(ws[2], now); age != 2*time.Second {
		t.Errorf("Age: %v, want 2s", age)
	}
}

// A topic without records lists no workers; a missing topic is
// ErrNoTopic, which says how to create it.
func TestReadEmptyAndMissingTopics(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic := kafkatest.Name(t, "workers")
	c.CreateTopicWith(t, topic, 1, fleet.TopicConfigs())
	if ws, err := fleet.Read(context.Background(), c.Client(t), topic, time.Now()); err != nil || len(ws) != 0 {
		t.Errorf("empty topic: %v, %v; want none", ws, err)
	}
	_, err := fleet.Read(context.Background(), c.Client(t), kafkatest.Name(t, "none"), time.Now())
	if !errors.Is(err, fleet.ErrNoTopic) {
		t.Errorf("missing topic: %v, want ErrNoTopic", err)
	}
}

func TestStale(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		every, age time.Duration
		stale      bool
	}{
		{time.Second, 3 * time.Second, false},
		{time.Second, 3*time.Second + time.Millisecond, true},
		{0, 15 * time.Second, false}, // no interval: the default's bound
		{0, 16 * time.Second, true},
		{time.Minute, 2 * time.Minute, false},
	} {
		s := fleet.Status{Every: tc.every, LastSeen: now.Add(-tc.age)}
		if got := s.Stale(now); got != tc.stale {
			t.Errorf("every %v, age %v: stale %v, want %v", tc.every, tc.age, got, tc.stale)
		}
	}
}

func TestRateText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    fleet.Status
		want string
	}{
		{fleet.Status{}, "-"},
		{fleet.Status{RateTopic: "emails", RateLimit: 14, RateShare: 7}, "14/s (share 7/s)"},
		{fleet.Status{RateTopic: "emails", RateLimit: 0.5, RateShare: 0}, "0.5/s (share 0/s)"},
	} {
		if got := tc.s.RateText(); got != tc.want {
			t.Errorf("RateText of %+v = %q, want %q", tc.s, got, tc.want)
		}
	}
}
