package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/worker"
)

// pauseWorkerEnv makes this test binary a worker process of
// TestControlPausesReachWorkerProcesses: "seeds|group|topicA|topicB|controls".
const pauseWorkerEnv = "SHAREQ_TEST_PAUSE_WORKER"

// procLine is a line a pause worker process prints: what happened
// (paused, resumed, done), to what (a topic, a job's key), and when.
type procLine struct {
	what, of string
	at       time.Time
	ack      string
	delivery int
}

// runPauseWorker is a pause worker process's main: a worker of two topics
// whose jobs take 50 ms, printing "paused TOPIC NANOS", "resumed TOPIC
// NANOS" and "done KEY ACK DELIVERY NANOS" lines for the parent.
func runPauseWorker() {
	v := os.Getenv(pauseWorkerEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	var mu sync.Mutex // one line at a time on stdout
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+" %d\n", append(args, time.Now().UnixNano())...)
	}
	slow := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	w, err := worker.New(worker.Brokers(strings.Split(parts[0], ",")...), worker.Group(parts[1]),
		worker.Handle(parts[2], slow), worker.Handle(parts[3], slow), worker.Concurrency(4),
		worker.ControlTopic(parts[4]), worker.Observers(procObserver{say: say}),
		worker.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	// Bounded, should the parent die without killing it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Println("ERR Run returned", w.Run(ctx))
	os.Exit(3)
}

// procObserver prints what a pause worker process's parent reads.
type procObserver struct {
	worker.NopObserver
	say func(string, ...any)
}

func (o procObserver) JobFinished(j *handler.Job, r worker.Result) {
	o.say("done %s %s %d", j.Key, r.Ack, j.DeliveryCount)
}
func (o procObserver) TopicPaused(topic, _, _ string)             { o.say("paused %s", topic) }
func (o procObserver) TopicResumed(topic string, _ time.Duration) { o.say("resumed %s", topic) }

// pauseProcs are the parent's view of its pause worker processes.
type pauseProcs struct {
	events []chan procLine // per process: its pauses and resumes
	mu     sync.Mutex
	done   map[string][]procLine // job key → its ends, any process
}

// startPauseProcs starts n pause worker processes and reads their lines
// until they are killed at the test's end.
func startPauseProcs(t *testing.T, n int, env string) *pauseProcs {
	t.Helper()
	pp := &pauseProcs{done: map[string][]procLine{}}
	var readers sync.WaitGroup
	t.Cleanup(readers.Wait) // after the children's kills (cleanups run last first)
	for range n {
		ch := make(chan procLine, 256)
		pp.events = append(pp.events, ch)
		lines, _ := kafkatest.StartChild(t, pauseWorkerEnv+"="+env)
		readers.Go(func() {
			for l := range lines {
				pp.take(t, ch, l)
			}
		})
	}
	return pp
}

// take files one line of a child.
func (pp *pauseProcs) take(t *testing.T, events chan<- procLine, l string) {
	f := strings.Fields(l)
	if len(f) == 0 || f[0] == "ERR" {
		t.Errorf("pause worker process: %s", l)
		return
	}
	nanos, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil || len(f) < 3 {
		t.Errorf("pause worker process printed %q", l)
		return
	}
	pl := procLine{what: f[0], of: f[1], at: time.Unix(0, nanos)}
	if pl.what == "done" && len(f) == 5 {
		pl.ack = f[2]
		pl.delivery, _ = strconv.Atoi(f[3])
		pp.mu.Lock()
		pp.done[pl.of] = append(pp.done[pl.of], pl)
		pp.mu.Unlock()
		return
	}
	events <- pl
}

// heard waits for every process's next pause (or resume) of topic and
// returns when each heard it.
func (pp *pauseProcs) heard(t *testing.T, topic string, paused bool) []time.Time {
	t.Helper()
	want := map[bool]string{true: "paused", false: "resumed"}[paused]
	var out []time.Time
	deadline := time.After(45 * time.Second)
	for i, ch := range pp.events {
		for len(out) == i {
			select {
			case l := <-ch:
				if l.what == want && l.of == topic {
					out = append(out, l.at)
				}
			case <-deadline:
				t.Fatalf("process %d: no %s of %s within 45 s", i, want, topic)
			}
		}
	}
	return out
}

// waitDone waits until every key has ended at least once.
func (pp *pauseProcs) waitDone(t *testing.T, keys []string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pp.mu.Lock()
		missing := slices.IndexFunc(keys, func(k string) bool { return len(pp.done[k]) == 0 })
		pp.mu.Unlock()
		if missing < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not done within 60 s", keys[missing])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pauses reach worker processes: three processes of one group, each a
// worker of two topics, 20 pauses and resumes of one topic while jobs of
// both run. How long a pause took from Pause returning to each process's
// TopicPaused is logged (the goal: within a second at p99); after
// every process heard it, jobs of the paused topic produced then do not
// run before the resume, while the other topic's jobs run; every job runs
// once, accepted on its first delivery.
func TestControlPausesReachWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := kafkatest.New(t)
	ta, tb, group := c.Topic(t, 3), c.Topic(t, 3), c.Group(t)
	cd := newControlled(t, c)
	pp := startPauseProcs(t, 3, strings.Join([]string{strings.Join(c.Seeds, ","), group, ta, tb, cd.topic}, "|"))
	var keys []string
	produce := func(topic string, n int) []string {
		var ks []string
		for range n {
			ks = append(ks, fmt.Sprintf("%s-%d", topic, len(keys)+len(ks)))
		}
		produceKeys(t, c, topic, ks...)
		keys = append(keys, ks...)
		return ks
	}
	pp.waitDone(t, append(produce(ta, 30), produce(tb, 30)...))

	var lat []time.Duration
	for range 20 {
		produce(ta, 10) // some run, some wait in hand when the pause comes
		cd.pause(t, group, ta)
		written := time.Now()
		for _, at := range pp.heard(t, ta, true) {
			lat = append(lat, at.Sub(written))
		}
		held := produce(ta, 3)
		pp.waitDone(t, produce(tb, 3)) // the other topic runs on
		resumed := time.Now()
		cd.resume(t, group, ta)
		pp.heard(t, ta, false)
		pp.waitDone(t, held)
		pp.mu.Lock()
		for _, k := range held {
			if at := pp.done[k][0].at; at.Before(resumed) {
				t.Errorf("%s, produced while %s was paused on every process, ran %v before the resume", k, ta, resumed.Sub(at))
			}
		}
		pp.mu.Unlock()
	}
	pp.waitDone(t, keys)
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, k := range keys {
		if ends := pp.done[k]; len(ends) != 1 || ends[0].ack != worker.AckAccept.String() || ends[0].delivery != 1 {
			t.Errorf("%s ended %+v, want once, accepted on its first delivery", k, ends)
		}
	}
	slices.Sort(lat)
	t.Logf("%s %s: a pause reached each of 3 worker processes in p50 %v, p99 %v, max %v (%d pauses × 3 processes)",
		c.Kind, c.Version, lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], len(lat)/3)
}
