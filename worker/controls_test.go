package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// pauseClock is a PausedTopicObserver that sends each pause and resume
// it hears, with when.
type pauseClock struct {
	worker.NopObserver
	heard chan pauseHeard
}

type pauseHeard struct {
	topic  string
	paused bool
	at     time.Time
}

func newPauseClock() *pauseClock { return &pauseClock{heard: make(chan pauseHeard, 64)} }

func (p *pauseClock) TopicPaused(topic, _, _ string) {
	p.heard <- pauseHeard{topic, true, time.Now()}
}

func (p *pauseClock) TopicResumed(topic string, _ time.Duration) {
	p.heard <- pauseHeard{topic, false, time.Now()}
}

// next waits for the next pause or resume heard of topic; what else it
// hears meanwhile is dropped.
func (p *pauseClock) next(t *testing.T, topic string, paused bool) time.Time {
	t.Helper()
	deadline := time.After(45 * time.Second)
	for {
		select {
		case h := <-p.heard:
			if h.topic == topic && h.paused == paused {
				return h.at
			}
		case <-deadline:
			t.Fatalf("no %s of %s heard within 45 s", map[bool]string{true: "pause", false: "resume"}[paused], topic)
		}
	}
}

// both waits for the pauses (or resumes) of two topics, heard in either
// order.
func (p *pauseClock) both(t *testing.T, a, b string, paused bool) {
	t.Helper()
	deadline := time.After(45 * time.Second)
	heard := map[string]bool{}
	for !heard[a] || !heard[b] {
		select {
		case h := <-p.heard:
			if h.paused == paused {
				heard[h.topic] = true
			}
		case <-deadline:
			t.Fatalf("heard %v within 45 s, want %s and %s (paused %v)", heard, a, b, paused)
		}
	}
}

// controlled is a test's control topic and its client.
type controlled struct {
	c     *kafkatest.Cluster
	topic string
	ctl   *control.Client
}

func newControlled(t *testing.T, c *kafkatest.Cluster) *controlled {
	t.Helper()
	topic := kafkatest.Name(t, "controls")
	ctl, err := control.New(c.Client(t), control.Topic(topic))
	if err != nil {
		t.Fatal(err)
	}
	return &controlled{c: c, topic: topic, ctl: ctl}
}

func (cd *controlled) pause(t *testing.T, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cd.ctl.Pause(ctx, control.Pause{Group: group, Topic: topic, Reason: "test", By: "tester"}); err != nil {
		t.Fatal(err)
	}
}

func (cd *controlled) resume(t *testing.T, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cd.ctl.Resume(ctx, group, topic); err != nil {
		t.Fatal(err)
	}
}

// onceEach fails unless every key was accepted exactly once on its first
// delivery and nothing else was reported.
func onceEach(t *testing.T, obs *shareqtest.Observer, keys []string) {
	t.Helper()
	got := map[string]int{}
	for _, e := range obs.Events() {
		if e.Result.Ack != worker.AckAccept || e.Count != 1 {
			t.Errorf("%s: %v on delivery %d (%v), want accepted on its first", e.Key, e.Result.Ack, e.Count, e.Result.Err)
		}
		got[e.Key]++
	}
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s finished %d times, want once", k, got[k])
		}
	}
	if len(got) != len(keys) {
		t.Errorf("%d keys finished, want %d", len(got), len(keys))
	}
}

// Pauses written with control.Client reach running workers: 20 pauses
// and resumes of one topic, three workers of the group in this process,
// jobs of both topics running all along. How long each took to reach
// each worker (from Pause returning to the worker's TopicPaused) is
// logged, not asserted. The other topic runs on; no job is lost or run
// twice.
func TestControlPausesReachRunningWorkers(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ta, tb, group := c.Topic(t, 3), c.Topic(t, 3), c.Group(t)
	cd := newControlled(t, c)
	obs := new(shareqtest.Observer)
	slow := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	var clocks []*pauseClock
	for range 3 {
		pc := newPauseClock()
		clocks = append(clocks, pc)
		w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.ControlTopic(cd.topic),
			worker.Handle(ta, slow), worker.Handle(tb, slow), worker.Concurrency(4),
			worker.Observers(obs, pc), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		kafkatest.Run(t, w.Run)
	}
	var keys []string
	produce := func(topic string, n int) {
		for range n {
			k := fmt.Sprintf("%s-%d", topic, len(keys))
			keys = append(keys, k)
			produceKeys(t, c, topic, k)
		}
	}
	produce(ta, 40)
	produce(tb, 40)
	obs.WaitFor(t, 45*time.Second, "jobs running", func([]shareqtest.Event) bool { return obs.Count(worker.AckAccept) >= 10 })

	var lat []time.Duration
	for range 20 {
		produce(ta, 20) // some run, some wait in hand when the pause comes
		cd.pause(t, group, ta)
		written := time.Now()
		for _, pc := range clocks {
			lat = append(lat, pc.next(t, ta, true).Sub(written))
		}
		// The other topic runs on meanwhile.
		before := len(keys)
		produce(tb, 2)
		waitAccepted(t, obs, keys[before:]...)
		cd.resume(t, group, ta)
		for _, pc := range clocks {
			pc.next(t, ta, false)
		}
	}
	waitAccepted(t, obs, keys...)
	slices.Sort(lat)
	t.Logf("%s %s: a pause reached each of 3 workers in p50 %v, p99 %v, max %v (%d pauses × 3 workers)",
		c.Kind, c.Version, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], len(lat)/3)
	onceEach(t, obs, keys)
}

// A worker started while its topic is paused starts paused: it runs the
// other topic's jobs and none of the paused one's until the resume. A
// pause of the whole group then pauses both topics.
func TestControlPauseBeforeTheStartAndOfTheWholeGroup(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ta, tb, group := c.Topic(t, 1), c.Topic(t, 1), c.Group(t)
	cd := newControlled(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cd.ctl.EnsureTopic(ctx); err != nil {
		t.Fatal(err)
	}
	cd.pause(t, group, ta)

	obs, stats, pc := new(shareqtest.Observer), &memberStatsLog{}, newPauseClock()
	la, lb := newRunLog(""), newRunLog("")
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.ControlTopic(cd.topic),
		worker.Handle(ta, la), worker.Handle(tb, lb),
		worker.Observers(obs, stats, pc), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	pc.next(t, ta, true)
	produceKeys(t, c, ta, "a1", "a2")
	produceKeys(t, c, tb, "b1", "b2")
	waitAccepted(t, obs, "b1", "b2")
	_, n := stats.snapshotsAfter(t, 0, "joined", func(s worker.MemberStats) bool { return s.State == "joined" })
	stats.snapshotsAfter(t, n+2, "two seconds later", func(worker.MemberStats) bool { return true })
	if got := la.list(); len(got) != 0 {
		t.Fatalf("paused topic ran %v", got)
	}
	if got := w.PausedTopics(); len(got) != 1 || got[0].Topic != ta || got[0].Reason != "test" || got[0].By != "tester" {
		t.Fatalf("PausedTopics = %+v", got)
	}

	cd.resume(t, group, ta)
	pc.next(t, ta, false)
	waitAccepted(t, obs, "a1", "a2")

	cd.pause(t, group, "")
	pc.both(t, ta, tb, true)
	if got := w.PausedTopics(); len(got) != 2 {
		t.Fatalf("PausedTopics = %+v after the whole group's pause, want both topics", got)
	}
	produceKeys(t, c, ta, "a3")
	produceKeys(t, c, tb, "b3")
	_, n = stats.snapshotsAfter(t, n, "a snapshot", func(worker.MemberStats) bool { return true })
	stats.snapshotsAfter(t, n+2, "two seconds later", func(worker.MemberStats) bool { return true })
	if a, b := la.list(), lb.list(); len(a) != 2 || len(b) != 2 {
		t.Fatalf("runs while the group was paused: %v %v, want only the two of each before", a, b)
	}
	cd.resume(t, group, "")
	waitAccepted(t, obs, "a3", "b3")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	onceEach(t, obs, []string{"a1", "a2", "a3", "b1", "b2", "b3"})
}

// A worker that cannot read the control topic for a while (kfake answers
// its fetches with an authorization error) keeps the pauses it last
// read, says so once, says once when it reads again, and then applies
// what was written meanwhile. kfake only: it can fail one kind of
// request.
func TestControlWatchKeepsTheLastStateWhileItCannotRead(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	fake := c.Fake()
	if fake == nil {
		t.Skip("needs kfake to fail the control topic's fetches")
	}
	ta, group := c.Topic(t, 1), c.Group(t)
	cd := newControlled(t, c)
	var failing atomic.Bool
	fake.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		resp.Version = fr.GetVersion()
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var logs logbuf.Buffer
	pc := newPauseClock()
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.ControlTopic(cd.topic),
		worker.Handle(ta, newRunLog("")), worker.Observers(pc),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, nil))), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	cd.pause(t, group, ta)
	pc.next(t, ta, true)

	failing.Store(true)
	const warn, back = "pause control cannot reach this worker", "the control topic is readable again"
	waitLog := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(logs.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q within 30 s:\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The watch's long poll ends within 5 s; the next fetch fails.
	waitLog(warn)
	cd.resume(t, group, ta)     // written while the worker cannot read it
	time.Sleep(3 * time.Second) // the watch retries after 1 s and 2 s: no second Warn
	if got := w.PausedTopics(); len(got) != 1 {
		t.Fatalf("PausedTopics = %+v while the control topic cannot be read, want the last read", got)
	}
	failing.Store(false)
	pc.next(t, ta, false)
	waitLog(back)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n, m := strings.Count(logs.String(), warn), strings.Count(logs.String(), back); n != 1 || m != 1 {
		t.Errorf("%d lines %q and %d %q, want 1 each:\n%s", n, warn, m, back, logs.String())
	}
}

// A limit written with control.Client reaches a running worker through
// the same watch: a key concurrency raised from the code's 1 to 3 lets
// three jobs of the key run at once.
func TestControlLimitReachesARunningWorker(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	topic, group := c.Topic(t, 1), c.Group(t)
	cd := newControlled(t, c)
	obs := new(shareqtest.Observer)
	release := make(chan struct{})
	var mu sync.Mutex
	running, most := 0, 0
	h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	runningNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return running
	}
	w, err := worker.New(worker.Brokers(c.Seeds...), worker.Group(group), worker.ControlTopic(cd.topic),
		worker.Handle(topic, h), worker.Concurrency(5),
		worker.KeyLimit(topic, worker.Keys{Key: func(*handler.Job) string { return "k" }, Concurrency: 1}),
		worker.Observers(obs), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stop := kafkatest.Run(t, w.Run)
	produceKeys(t, c, topic, "j1", "j2", "j3", "j4")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waited 45 s for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("one job running", func() bool { return runningNow() == 1 })
	three := 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cd.ctl.SetLimit(ctx, control.Limit{Group: group, Topic: topic, KeyConcurrency: &three, Reason: "test", By: "tester"}); err != nil {
		t.Fatal(err)
	}
	waitFor("three jobs of the key running", func() bool { return runningNow() == 3 })
	close(release)
	waitAccepted(t, obs, "j1", "j2", "j3", "j4")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if most != 3 {
		t.Errorf("at most %d jobs of the key ran at once, want 3", most)
	}
}
