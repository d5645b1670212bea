package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// healed is a heal's fleet: workers of one group with HealStalls on,
// a control topic and a status topic of their own.
type healed struct {
	*bundle
	statuses string
	cd       *controlled
	workers  []*worker.Worker
	quiet    time.Duration // how long a heal waits for the members to hold nothing
}

func newHealed(t *testing.T) *healed {
	t.Helper()
	b := setup(t, 1)
	return &healed{bundle: b, statuses: statusTopic(t, b.c), cd: newControlled(t, b.c), quiet: 5 * time.Second}
}

// start runs a worker with HealStalls on (the heal's waits short).
func (hd *healed) start(t *testing.T, name string, h handler.Handler, opts ...worker.Option) *worker.Worker {
	t.Helper()
	w, err := worker.New(append([]worker.Option{worker.Brokers(hd.c.Seeds...), worker.Group(hd.group), worker.Handle(hd.topic, h),
		worker.Observers(hd.obs), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5 * time.Second),
		worker.ClientOpts(kgo.ClientID(name)), worker.HealStalls(true), worker.HealTimes(hd.quiet, 3*time.Second),
		worker.StatusTopic(hd.statuses), worker.StatusEvery(time.Second), worker.ControlTopic(hd.cd.topic)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	kafkatest.Run(t, w.Run)
	hd.workers = append(hd.workers, w)
	return w
}

// waitJoined waits until n workers of the group publish a member ID.
func (hd *healed) waitJoined(t *testing.T, n int) {
	t.Helper()
	waitWorkers(t, hd.c, hd.statuses, hd.group, 60*time.Second, fmt.Sprintf("%d workers joined", n), func(ws []fleet.Status) bool {
		joined := 0
		for _, s := range ws {
			if s.MemberID != "" && s.State == "joined" {
				joined++
			}
		}
		return joined == n
	})
}

// groupPause returns the whole-group pause in force, if any.
func (hd *healed) groupPause(t *testing.T) (control.Pause, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := hd.cd.ctl.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Paused(hd.group, "")
}

// keys returns n job keys with prefix.
func keys(prefix string, n int) []string {
	var ks []string
	for i := range n {
		ks = append(ks, fmt.Sprintf("%s-%d", prefix, i))
	}
	return ks
}

// wantOnceEach fails unless every key ran exactly once, on its first
// delivery, and was accepted.
func wantOnceEach(t *testing.T, events []shareqtest.Event, ks []string) {
	t.Helper()
	runs := map[string]int{}
	for _, e := range events {
		runs[e.Key]++
		if e.Count != 1 {
			t.Errorf("job %s ran on delivery %d: the heal spent a delivery", e.Key, e.Count)
		}
	}
	for _, k := range ks {
		if runs[k] != 1 {
			t.Errorf("job %s ran %d times, want once", k, runs[k])
		}
	}
}

// With the group holding nothing, the heal pauses the group, replaces
// the share session of every member on the partition's leader with an
// empty one on a connection it closes (what frees a stalled partition on
// Kafka 4.3.1 and 4.4.0), and resumes: the members open new sessions, as
// after a broker restart, and every job before and after runs once, on
// its first delivery. (The partition was not stalled: the try is told
// its start offset was -1, so it counts as freed once the group's start
// offset is read, and the test looks only at what was poked.)
func TestStallHealPokesEveryMemberOnceTheGroupHoldsNothing(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	h := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w := hd.start(t, "heal-a", h)
	hd.start(t, "heal-b", h)
	hd.waitJoined(t, 2)
	before := keys("before", 20)
	hd.produce(t, before...)
	hd.obs.WaitFor(t, 60*time.Second, "20 jobs accepted", func(es []shareqtest.Event) bool {
		return countAck(es, worker.AckAccept) >= 20 // of the events returned
	})

	healer := w.NewStallHealer(t, "the test")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	result, poked, why := healer.Heal(ctx, hd.topic, 0, -1)
	t.Logf("%s: heal %s, %d members poked: %s", hd.c.Kind, result, poked, why)
	if result == worker.HealSkipped || poked != 2 {
		t.Fatalf("heal %s with %d members poked (%s), want both members poked", result, poked, why)
	}
	if p, ok := hd.groupPause(t); ok {
		t.Fatalf("the heal left the group paused: %v", p)
	}
	if again, _, _ := healer.Heal(ctx, hd.topic, 0, -1); again != "" {
		t.Errorf("a second heal of the partition at once: %s, want none (one try per 10 minutes)", again)
	}

	after := keys("after", 20)
	hd.produce(t, after...)
	events := hd.obs.WaitFor(t, 60*time.Second, "40 jobs accepted", func(es []shareqtest.Event) bool {
		return countAck(es, worker.AckAccept) >= 40 // of the events returned
	})
	wantOnceEach(t, events, append(before, after...))
}

// A pause of the group in force (an operator's) stops the heal before it
// does anything: the pause is neither overwritten nor lifted.
func TestStallHealLeavesAPauseInForceAlone(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	w := hd.start(t, "heal-a", handler.Func(func(context.Context, *handler.Job) error { return nil }))
	hd.waitJoined(t, 1)
	hd.cd.pause(t, hd.group, "")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	result, poked, why := w.NewStallHealer(t, "the test").Heal(ctx, hd.topic, 0, 0)
	if result != worker.HealSkipped || poked != 0 {
		t.Fatalf("heal %s with %d members poked (%s), want skipped, none poked", result, poked, why)
	}
	p, ok := hd.groupPause(t)
	if !ok || p.By != "tester" {
		t.Fatalf("the pause in force after the heal: %v (%v), want the operator's", p, ok)
	}
}

// A member holding a record (a job running) makes the heal give up
// without poking anyone: the group resumes, and the job's record is
// neither released nor delivered again.
func TestStallHealGivesUpWhileAMemberHoldsARecord(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	release := make(chan struct{})
	h := holding(release)
	w := hd.start(t, "heal-a", h)
	hd.start(t, "heal-b", h)
	hd.waitJoined(t, 2)
	hd.produce(t, "hold")
	waitWorkers(t, hd.c, hd.statuses, hd.group, 60*time.Second, "the job running", func(ws []fleet.Status) bool {
		for _, s := range ws {
			if s.Running == 1 {
				return true
			}
		}
		return false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	result, poked, why := w.NewStallHealer(t, "the test").Heal(ctx, hd.topic, 0, 0)
	t.Logf("%s: heal %s: %s", hd.c.Kind, result, why)
	if result != worker.HealSkipped || poked != 0 {
		t.Fatalf("heal %s with %d members poked (%s), want skipped, none poked", result, poked, why)
	}
	if p, ok := hd.groupPause(t); ok {
		t.Fatalf("the heal left the group paused: %v", p)
	}
	close(release)
	more := keys("more", 10)
	hd.produce(t, more...)
	events := hd.obs.WaitFor(t, 60*time.Second, "11 jobs accepted", func(es []shareqtest.Event) bool {
		return countAck(es, worker.AckAccept) >= 11 // of the events returned
	})
	wantOnceEach(t, events, append(more, "hold"))
}

// Jobs that wait for a handler when the heal pauses the group would keep
// their records, and a member holding records makes the heal give up;
// under a heal's pause they are copied for later at once instead (no
// delivery spent), so the heal goes on once the running job ends, and
// the copies run after the resume, each once, on its first delivery.
// (A stream of short jobs keeps the worker's prefetch, and so jobs
// waiting in hand, above zero; one long job keeps the other slot.)
func TestStallHealCopiesTheJobsWaitingForItsPause(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	hd.quiet = 30 * time.Second
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, j *handler.Job) error {
		if string(j.Key) != "hold" {
			time.Sleep(5 * time.Millisecond)
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	w := hd.start(t, "heal-a", h, worker.Concurrency(2))
	hd.waitJoined(t, 1)
	hd.produce(t, "hold")
	stream := keys("stream", 2000)
	hd.produce(t, stream...)
	waitWorkers(t, hd.c, hd.statuses, hd.group, 60*time.Second, "jobs waiting in hand beside the two running", func(ws []fleet.Status) bool {
		return len(ws) == 1 && ws[0].Running == 2 && ws[0].Held > 2
	})

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type try struct {
		result, why string
		poked       int
	}
	done := make(chan try, 1)
	go func() {
		var r try
		r.result, r.poked, r.why = w.NewStallHealer(t, "the test").Heal(ctx, hd.topic, 0, -1)
		done <- r
	}()
	waitWorkers(t, hd.c, hd.statuses, hd.group, 60*time.Second, "the worker paused by the heal", func(ws []fleet.Status) bool {
		return len(ws) == 1 && len(ws[0].Paused) > 0
	})
	close(release)
	r := <-done
	t.Logf("%s: heal %s, %d members poked: %s", hd.c.Kind, r.result, r.poked, r.why)
	if r.result == worker.HealSkipped || r.poked != 1 {
		t.Fatalf("heal %s with %d members poked (%s), want the member poked", r.result, r.poked, r.why)
	}

	want := append([]string{"hold"}, stream...)
	events := hd.obs.WaitFor(t, 90*time.Second, "every job succeeded", func(es []shareqtest.Event) bool {
		return countOutcome(es, worker.OutcomeSucceeded) >= len(want)
	})
	var ran []shareqtest.Event
	for _, e := range events {
		if e.Result.Outcome == worker.OutcomeSucceeded {
			ran = append(ran, e)
		}
	}
	wantOnceEach(t, ran, want)
	copied := countOutcome(events, worker.OutcomeSnoozed)
	t.Logf("%d jobs copied for later under the heal's pause", copied)
	if copied == 0 {
		t.Errorf("no job was copied for later under the heal's pause, though jobs waited in hand when it came")
	}
}

// countAck counts the events of jobs acknowledged with ack. (A wait's
// condition counts the events it is given, which WaitFor returns; the
// observer's live count may already hold more.)
func countAck(events []shareqtest.Event, ack worker.Ack) int {
	n := 0
	for _, e := range events {
		if e.Result.Ack == ack {
			n++
		}
	}
	return n
}

// countOutcome counts the events of jobs that ended with outcome.
func countOutcome(events []shareqtest.Event, outcome worker.Outcome) int {
	n := 0
	for _, e := range events {
		if e.Result.Outcome == outcome {
			n++
		}
	}
	return n
}

// HealStalls needs the control topic (its pause) and the status topic
// (the members' statuses): New refuses it without either.
func TestHealStallsNeedsControlAndStatusTopics(t *testing.T) {
	t.Parallel()
	base := []worker.Option{worker.Brokers("127.0.0.1:9092"), worker.Group("g"),
		worker.Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })), worker.HealStalls(true)}
	for _, o := range []worker.Option{worker.ControlTopic(""), worker.StatusTopic("")} {
		if _, err := worker.New(append(base, o)...); err == nil {
			t.Errorf("New with HealStalls(true) and a topic off: no error")
		} else {
			t.Log(err)
		}
	}
	if _, err := worker.New(base...); err != nil {
		t.Errorf("New with HealStalls(true) and both topics: %v", err)
	}
}

// An operator's pause written while a heal waits for the members (a job
// holds a record here) ends the heal at once, and stays: the heal lifts
// only its own pause.
func TestStallHealStopsAtAnOperatorsPauseAndLeavesIt(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	hd.quiet = time.Minute // the heal would wait this long for the job
	release := make(chan struct{})
	w := hd.start(t, "heal-a", handler.Func(func(ctx context.Context, j *handler.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}))
	defer close(release)
	hd.waitJoined(t, 1)
	hd.produce(t, "hold")
	waitWorkers(t, hd.c, hd.statuses, hd.group, 60*time.Second, "the job running", func(ws []fleet.Status) bool {
		return len(ws) == 1 && ws[0].Running == 1
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type outcome struct {
		result, why string
		poked       int
	}
	done := make(chan outcome, 1)
	healer := w.NewStallHealer(t, "the test")
	go func() {
		result, poked, why := healer.Heal(ctx, hd.topic, 0, 0)
		done <- outcome{result, why, poked}
	}()
	for {
		if p, ok := hd.groupPause(t); ok && p.By == "shareq stall heal" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	hd.cd.pause(t, hd.group, "")
	select {
	case o := <-done:
		if o.result != worker.HealSkipped || o.poked != 0 {
			t.Fatalf("heal %s with %d members poked (%s), want skipped, none poked", o.result, o.poked, o.why)
		}
		t.Logf("%s: heal %s: %s", hd.c.Kind, o.result, o.why)
	case <-time.After(4 * time.Second):
		t.Fatal("the heal went on waiting after an operator's pause replaced its own")
	}
	if p, ok := hd.groupPause(t); !ok || p.By != "tester" {
		t.Fatalf("the pause in force after the heal: %v (%v), want the operator's", p, ok)
	}
}

// A heal's pause whose healer is gone (a worker killed mid-heal) would
// keep the group paused until an operator resumed it: a worker with
// HealStalls lifts a heal's pause once it is older than the stale bound,
// and the jobs produced meanwhile run. An operator's pause as old is
// never lifted.
func TestStallHealLiftsAHealPauseWhoseHealerIsGone(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	h := handler.Func(func(context.Context, *handler.Job) error { return nil })
	hd.start(t, "heal-a", h, worker.StallCheckTimes(time.Minute, 200*time.Millisecond), worker.HealStaleAfter(2*time.Second))
	hd.waitJoined(t, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// As a healer writes it (By "shareq stall heal"), then dies.
	orphan := control.Pause{Group: hd.group, By: "shareq stall heal", At: time.Now(), Reason: "partition p/0 stalled on broker 1: worker gone frees it"}
	if err := hd.cd.ctl.Pause(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, hd.c, hd.statuses, hd.group, 30*time.Second, "the worker paused by the orphaned heal pause", func(ws []fleet.Status) bool {
		return len(ws) == 1 && len(ws[0].Paused) > 0 && ws[0].Paused[0].By == orphan.By
	})
	ks := keys("held", 10)
	hd.produce(t, ks...)
	events := hd.obs.WaitFor(t, 60*time.Second, "10 jobs accepted once the orphaned pause is lifted", func(es []shareqtest.Event) bool {
		return countAck(es, worker.AckAccept) >= 10 // of the events returned
	})
	wantOnceEach(t, events, ks)
	// The lift comes only once the pause is older than the stale bound,
	// counted from its own time: no job may end before that.
	if ran := events[0].At.Sub(orphan.At); ran < 2*time.Second {
		t.Fatalf("the first job ended %v after the orphaned pause was written, before the 2s stale bound: the pause did not hold it", ran)
	}
	if p, ok := hd.groupPause(t); ok {
		t.Fatalf("the orphaned heal pause is still in force: %v", p)
	}

	hd.cd.pause(t, hd.group, "") // an operator's
	// The jobs come once the worker has the pause: a record produced
	// while the pause is still on its way on the control topic may be
	// fetched and run first.
	waitWorkers(t, hd.c, hd.statuses, hd.group, 30*time.Second, "the worker paused by the operator", func(ws []fleet.Status) bool {
		return len(ws) == 1 && len(ws[0].Paused) > 0 && ws[0].Paused[0].By == "tester"
	})
	more := keys("more", 5)
	hd.produce(t, more...)
	time.Sleep(3 * time.Second) // past the stale bound: a wrong lift would come within it
	if p, ok := hd.groupPause(t); !ok || p.By != "tester" {
		t.Fatalf("the operator's pause after the stale bound: %v (%v), want it kept", p, ok)
	}
	if n := hd.obs.Count(worker.AckAccept); n != 10 {
		t.Fatalf("%d jobs accepted while the operator's pause lasted, want the 10 from before", n)
	}
}

// Every worker's stall check finds a stalled partition, most at once: a
// worker that had another worker's heal pause in force tries no heal of
// its own for the next 10 minutes, so the fleet, not each worker, tries
// about once per 10 minutes (a try that gave up costs the group a pause).
func TestStallHealTriesNoneAfterAnotherWorkersHeal(t *testing.T) {
	t.Parallel()
	hd := newHealed(t)
	w := hd.start(t, "heal-a", handler.Func(func(context.Context, *handler.Job) error { return nil }))
	hd.waitJoined(t, 1)
	healer := w.NewStallHealer(t, "the test")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	other := control.Pause{Group: hd.group, By: "shareq stall heal", At: time.Now(), Reason: "partition p/0 stalled on broker 1: another worker frees it"}
	if err := hd.cd.ctl.Pause(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the worker paused by the other worker's heal", func() bool {
		ps := w.PausedTopics()
		return len(ps) == 1 && ps[0].By == other.By
	})
	healer.WatchPauses(ctx)
	hd.cd.resume(t, hd.group, "")
	waitFor(t, 30*time.Second, "the worker resumed", func() bool { return len(w.PausedTopics()) == 0 })

	if result, _, why := healer.Heal(ctx, hd.topic, 0, 0); result != "" {
		t.Fatalf("a heal right after another worker's: %s (%s), want none tried", result, why)
	}
}
