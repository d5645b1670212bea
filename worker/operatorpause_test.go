package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// runLog records the runs of a handler: each job's key and the delivery
// count it ran on, in the order they started; the job keyed block waits
// for release (or its context) before it succeeds.
type runLog struct {
	block   string
	release chan struct{}

	mu   sync.Mutex
	runs []string // "key#count"
}

func newRunLog(block string) *runLog { return &runLog{block: block, release: make(chan struct{})} }

func (l *runLog) Handle(ctx context.Context, j *handler.Job) error {
	l.mu.Lock()
	l.runs = append(l.runs, fmt.Sprintf("%s#%d", j.Key, j.DeliveryCount))
	l.mu.Unlock()
	if string(j.Key) == l.block {
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (l *runLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// snapshotsAfter waits for a MemberStats snapshot taken after the first n
// that satisfies ok, and returns it with the count of snapshots then.
func (m *memberStatsLog) snapshotsAfter(t *testing.T, n int, what string, ok func(worker.MemberStats) bool) (worker.MemberStats, int) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		m.mu.Lock()
		for i := n; i < len(m.last); i++ {
			if ok(m.last[i]) {
				s := m.last[i]
				m.mu.Unlock()
				return s, i + 1
			}
		}
		var last worker.MemberStats
		if len(m.last) > 0 {
			last = m.last[len(m.last)-1]
		}
		m.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no MemberStats with %s within 45 s; last %+v", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func produceKeys(t *testing.T, c *kafkatest.Cluster, topic string, keys ...string) {
	t.Helper()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(k)}
	}
	c.Produce(t, recs...)
}

func waitAccepted(t *testing.T, obs *shareqtest.Observer, keys ...string) {
	t.Helper()
	obs.WaitFor(t, 45*time.Second, fmt.Sprintf("%v accepted", keys), func(es []shareqtest.Event) bool {
		for _, k := range keys {
			if count(es, k, worker.AckAccept) == 0 {
				return false
			}
		}
		return true
	})
}

// An operator's pause of one topic: the worker fetches none of its
// records after the pause took effect, starts none of its jobs in hand
// (they wait, not released: each runs on its first delivery after the
// resume, in order), lets its running job finish, and runs its other
// topic all along. Nothing is lost or run twice.
func TestOperatorPauseOfOneTopic(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	paused, other, group := c.Topic(t, 1), c.Topic(t, 1), c.Group(t)
	obs, stats := new(shareqtest.Observer), &memberStatsLog{}
	pl, ol := newRunLog("a0"), newRunLog("")
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group),
		worker.Handle(paused, pl), worker.Handle(other, ol), worker.Concurrency(3),
		// One job of the paused topic at a time, so that some wait in hand.
		worker.KeyLimit(paused, worker.Keys{Key: func(*handler.Job) string { return "k" }, Concurrency: 1}),
		worker.Observers(obs, stats), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second),
		worker.ControlTopic("")) // the test sets the pauses itself (SetPauses)
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	produceKeys(t, c, paused, "a0", "a1", "a2")
	_, n := stats.snapshotsAfter(t, 0, "a0 running, a1 and a2 in hand", func(s worker.MemberStats) bool {
		return s.Running == 1 && s.Waiting == 2
	})
	if err := w.SetPauses(ctx, worker.TopicPause{Topic: paused, Reason: "test", By: "tester"}); err != nil {
		t.Fatal(err)
	}
	if got := w.PausedTopics(); len(got) != 1 || got[0].Topic != paused || got[0].By != "tester" {
		t.Fatalf("PausedTopics = %+v", got)
	}
	// A fetch sent before the pause may still be out: the other topic's
	// first record comes back on it or after it, and every fetch after
	// that one knows of the pause.
	produceKeys(t, c, other, "b0")
	waitAccepted(t, obs, "b0")
	produceKeys(t, c, paused, "a3", "a4", "a5")
	produceKeys(t, c, other, "b1", "b2", "b3", "b4")
	close(pl.release) // a0, running, finishes
	waitAccepted(t, obs, "a0", "b1", "b2", "b3", "b4")
	s, n := stats.snapshotsAfter(t, n, "a1 and a2 waiting for the pause", func(s worker.MemberStats) bool {
		return s.Paused == 2 && s.Waiting == 0 && s.Running == 0
	})
	// Two more seconds of fetching: still none of a3..a5.
	s, _ = stats.snapshotsAfter(t, n+1, "a later snapshot", func(worker.MemberStats) bool { return true })
	if s.Fetched != 3+5 || s.Paused != 2 || s.Held != 2 {
		t.Fatalf("while paused: %d records fetched (want a0..a2 and b0..b4: 8), %d jobs paused, %d held (want 2, 2)", s.Fetched, s.Paused, s.Held)
	}
	if got := pl.list(); !slices.Equal(got, []string{"a0#1"}) {
		t.Fatalf("paused topic's runs while paused: %v, want [a0#1]", got)
	}

	if err := w.SetPauses(ctx); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, obs, "a1", "a2", "a3", "a4", "a5")
	if got, want := pl.list(), []string{"a0#1", "a1#1", "a2#1", "a3#1", "a4#1", "a5#1"}; !slices.Equal(got, want) {
		t.Fatalf("paused topic's runs %v, want %v: in order, each once, on its first delivery", got, want)
	}
	if got := ol.list(); len(got) != 5 {
		t.Fatalf("other topic's runs %v, want b0..b4 once each", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantAcceptedFirst(t, obs, 11)
}

// A pause of the whole group pauses each of the worker's topics: the
// records produced while it lasts run after it, once each, on their
// first delivery.
func TestOperatorPauseOfTheWholeGroup(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ta, tb, group := c.Topic(t, 2), c.Topic(t, 2), c.Group(t)
	obs, stats := new(shareqtest.Observer), &memberStatsLog{}
	la, lb := newRunLog(""), newRunLog("")
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group),
		worker.Handle(ta, la), worker.Handle(tb, lb),
		worker.Observers(obs, stats), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second),
		worker.ControlTopic("")) // the test sets the pauses itself (SetPauses)
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	produceKeys(t, c, ta, "a0")
	waitAccepted(t, obs, "a0")

	if err := w.SetPauses(ctx, worker.TopicPause{Reason: "freeze", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	got := w.PausedTopics()
	if len(got) != 2 || got[0].Reason != "freeze" || got[1].Reason != "freeze" {
		t.Fatalf("PausedTopics = %+v, want both topics", got)
	}
	_, n := stats.snapshotsAfter(t, 0, "joined", func(s worker.MemberStats) bool { return s.State == "joined" })
	produceKeys(t, c, ta, "a1", "a2")
	produceKeys(t, c, tb, "b1", "b2")
	stats.snapshotsAfter(t, n+2, "two seconds later", func(worker.MemberStats) bool { return true })
	if a, b := la.list(), lb.list(); len(a) != 1 || len(b) != 0 {
		t.Fatalf("runs while the group was paused: %v %v, want only a0 before it", a, b)
	}
	if err := w.SetPauses(ctx); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, obs, "a1", "a2", "b1", "b2")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantAcceptedFirst(t, obs, 5)
}

// wantAcceptedFirst fails t unless n jobs finished, each accepted on its
// first delivery.
func wantAcceptedFirst(t *testing.T, obs *shareqtest.Observer, n int) {
	t.Helper()
	for _, e := range obs.Events() {
		if e.Result.Ack != worker.AckAccept || e.Count != 1 {
			t.Errorf("%s: %v on delivery %d, want every job accepted on its first delivery", e.Key, e.Result.Ack, e.Count)
		}
	}
	if got := len(obs.Events()); got != n {
		t.Errorf("%d jobs finished, want %d", got, n)
	}
}
