package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// prefixKey is a Keys.Key that takes the record key up to its first '-':
// "slow-3" is a job of key "slow".
func prefixKey(job *handler.Job) string {
	k, _, _ := strings.Cut(string(job.Key), "-")
	return k
}

// jobKeys returns n record keys "<prefix>-<i>".
func jobKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return keys
}

// runsOf counts the handler runs of the jobs whose record key starts with
// prefix, and the most that ran at once.
type runsOf struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	runs    map[string]int
	counts  map[string][]int32 // delivery counts of each run, by record key
	snoozes map[string][]int   // Snoozes() of each run, by record key
}

func newRuns() *runsOf {
	return &runsOf{running: map[string]int{}, most: map[string]int{}, runs: map[string]int{},
		counts: map[string][]int32{}, snoozes: map[string][]int{}}
}

func (r *runsOf) begin(job *handler.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := prefixKey(job)
	r.running[k]++
	r.runs[k]++
	r.most[k] = max(r.most[k], r.running[k])
	r.counts[string(job.Key)] = append(r.counts[string(job.Key)], job.DeliveryCount)
	r.snoozes[string(job.Key)] = append(r.snoozes[string(job.Key)], job.Snoozes())
}

func (r *runsOf) end(job *handler.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[prefixKey(job)]--
}

// wantFirstDeliveries fails the test unless every run of every job was on
// delivery 1: waiting, breakers and snoozes spent no delivery.
func (r *runsOf) wantFirstDeliveries(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, cs := range r.counts {
		for _, c := range cs {
			if c != 1 {
				t.Errorf("job %s ran on deliveries %v: waiting spent a delivery", k, cs)
				break
			}
		}
	}
}

// One key's jobs block (a destination that hangs) while the others flow:
// with a per-key concurrency of 1, one job of the slow key takes a handler
// slot and the rest of its jobs wait without one, their locks renewed; the
// other keys' jobs all finish meanwhile; every job runs once, on delivery 1.
func TestKeyConcurrencyLetsOtherKeysPast(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	b.produce(t, jobKeys("slow", 6)...)
	b.produce(t, jobKeys("fast", 40)...)
	runs := newRuns()
	unblock := make(chan struct{})
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if prefixKey(job) == "slow" {
			select {
			case <-unblock:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	b.start(t, h, worker.Concurrency(3), worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey, Concurrency: 1}))
	b.obs.WaitFor(t, 60*time.Second, "every fast job done while the slow key blocks", func(fs []finished) bool {
		return countPrefix(fs, "fast", worker.OutcomeSucceeded) == 40
	})
	// The slow jobs waiting for their key outlive their locks: 18
	// renewals of 6 jobs renewed at about half their locks each time
	// take more than a lock. Had the worker not renewed the waiting
	// ones, they would come back on delivery 2.
	waitRenewals(t, b.obs, 18)
	close(unblock)
	b.obs.WaitFor(t, 60*time.Second, "every slow job done", func(fs []finished) bool {
		return countPrefix(fs, "slow", worker.OutcomeSucceeded) == 6
	})
	runs.mu.Lock()
	if runs.most["slow"] != 1 {
		t.Errorf("up to %d jobs of the slow key ran at once; want 1 (Keys.Concurrency)", runs.most["slow"])
	}
	if runs.runs["slow"] != 6 || runs.runs["fast"] != 40 {
		t.Errorf("runs: slow %d, fast %d; want 6 and 40", runs.runs["slow"], runs.runs["fast"])
	}
	runs.mu.Unlock()
	runs.wantFirstDeliveries(t)
}

// A key's rate: jobs of one key start at most one every Per/Rate; other
// keys are not held back by it.
func TestKeyRateSpacesAKeysStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.produce(t, jobKeys("paced", 6)...)
	b.produce(t, jobKeys("free", 20)...)
	st := &startTimes{key: "paced"}
	h := handler.Func(func(context.Context, *handler.Job) error { return nil })
	const every = 200 * time.Millisecond
	b.start(t, h, worker.Concurrency(4), worker.Observers(st), worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey, Rate: 5, Per: time.Second}))
	fs := b.obs.WaitFor(t, 60*time.Second, "every job done", func(fs []finished) bool {
		return countPrefix(fs, "paced", worker.OutcomeSucceeded) == 6 && countPrefix(fs, "free", worker.OutcomeSucceeded) == 20
	})
	starts := st.get()
	for i := 1; i < len(starts); i++ {
		// The observer hears of a start on the worker's loop just after
		// the executor's decision: allow 20 ms of scheduling.
		if gap := starts[i].Sub(starts[i-1]); gap < every-20*time.Millisecond {
			t.Errorf("jobs %d and %d of the paced key started %v apart; want at least %v (Rate 5 per second)", i-1, i, gap, every)
		}
	}
	for _, f := range fs {
		if f.Count != 1 {
			t.Errorf("job %s finished on delivery %d: waiting for the rate spent a delivery", f.Key, f.Count)
		}
	}
}

// A key whose destination is down (handler.KeyUnavailable): its breaker
// opens with one Warn line; its jobs wait, spending no delivery, while
// the other keys' jobs all finish; probes find it back, one Info line,
// and every job of the key runs to success on delivery 1.
func TestKeyBreakerHoldsOnlyItsKey(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	b.produce(t, jobKeys("down", 8)...)
	b.produce(t, jobKeys("up", 30)...)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var isDown atomic.Bool
	isDown.Store(true)
	var probes atomic.Int32
	runs := newRuns()
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if prefixKey(job) == "down" && isDown.Load() {
			probes.Add(1)
			return handler.KeyUnavailable(errors.New("connect: connection refused"))
		}
		return nil
	})
	b.start(t, h, worker.Concurrency(4), worker.Logger(logger),
		worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey}))
	b.obs.WaitFor(t, 60*time.Second, "every job of the key that is up done", func(fs []finished) bool {
		return countPrefix(fs, "up", worker.OutcomeSucceeded) == 30
	})
	waitFor(t, 30*time.Second, "a second probe of the key that is down", func() bool { return probes.Load() >= 3 })
	if n := countPrefix(b.obs.Events(), "down", 0); n != 0 {
		t.Fatalf("%d jobs of the key that is down ended while it was down; want them held", n)
	}
	isDown.Store(false)
	b.obs.WaitFor(t, 60*time.Second, "every job of the key back done", func(fs []finished) bool {
		return countPrefix(fs, "down", worker.OutcomeSucceeded) == 8
	})
	runs.wantFirstDeliveries(t)
	out := logs.String()
	if n := strings.Count(out, "a key's destination is down"); n != 1 {
		t.Errorf("%d lines say the key is down; want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "a key's destination is back"); n != 1 {
		t.Errorf("%d lines say the key is back; want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "key=down") {
		t.Errorf("the breaker's lines do not name the key:\n%s", out)
	}
}

// A job snoozed for a moment is held in the worker and runs again on the
// same delivery, seeing its snooze count; no outcome is reported for the
// snoozed run.
func TestShortSnoozeRunsAgainOnTheSameDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.produce(t, jobKeys("job", 10)...)
	runs := newRuns()
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if job.Snoozes() == 0 {
			return handler.Snooze(300 * time.Millisecond)
		}
		return nil
	})
	b.start(t, h, worker.Concurrency(4))
	fs := b.obs.WaitFor(t, 60*time.Second, "every job done", func(fs []finished) bool {
		return countPrefix(fs, "job", worker.OutcomeSucceeded) == 10
	})
	if len(fs) != 10 {
		t.Errorf("%d outcomes for 10 jobs; want one each:\n%s", len(fs), shareqtest.Summary(fs))
	}
	runs.wantFirstDeliveries(t)
	runs.mu.Lock()
	defer runs.mu.Unlock()
	for k, sn := range runs.snoozes {
		if fmt.Sprint(sn) != "[0 1]" {
			t.Errorf("job %s ran with snooze counts %v; want [0 1]", k, sn)
		}
	}
}

// A snooze longer than MaxHold: the worker holds the job until MaxHold,
// produces a copy to run at its time (the original ACCEPTed, outcome
// snoozed) and whichever worker fetches the copy holds it until it is
// due; the job runs once more, on its copy's first delivery, with its job
// ID and its snooze count.
func TestLongSnoozeIsCopiedForLater(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job-1")
	var mu sync.Mutex
	var ran []string // job ID, delivery, snoozes, not before?
	var runAt time.Time
	const snooze = 4 * time.Second
	var snoozedAt time.Time
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, fmt.Sprintf("%s d%d s%d", job.ID(), job.DeliveryCount, job.Snoozes()))
		if job.Snoozes() == 0 {
			snoozedAt = time.Now()
			return handler.Snooze(snooze)
		}
		runAt = time.Now()
		return nil
	})
	b.start(t, h, worker.MaxHold(1500*time.Millisecond))
	fs := b.obs.WaitFor(t, 60*time.Second, "the job copied, accepted and done after its snooze", func(fs []finished) bool {
		return countPrefix(fs, "job", worker.OutcomeSucceeded) == 1 && countPrefix(fs, "job", worker.OutcomeSnoozed) >= 1
	})
	if n := countPrefix(fs, "job", 0) - countPrefix(fs, "job", worker.OutcomeSnoozed) - 1; n != 0 {
		t.Errorf("outcomes other than snoozed copies and the run:\n%s", shareqtest.Summary(fs))
	}
	mu.Lock()
	defer mu.Unlock()
	id := fmt.Sprintf("%s/0/0", b.topic)
	if want := []string{id + " d1 s0", id + " d1 s1"}; fmt.Sprint(ran) != fmt.Sprint(want) {
		t.Errorf("runs %q; want %q (the copy keeps the job ID, runs on its first delivery, counts the snooze)", ran, want)
	}
	if early := snoozedAt.Add(snooze).Sub(runAt); early > 50*time.Millisecond {
		t.Errorf("the job ran %v before its snooze was over", early)
	}
}

// With a Snoozer, a snooze longer than a minute goes to it at once: the
// copy's headers say when it runs and what it is, and a second copy of
// the same record would have the same key.
func TestSnoozerKeepsLongSnoozes(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job-1")
	sn := &relaySnoozer{cl: b.c.Client(t)}
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		if job.Snoozes() == 0 {
			return handler.Snooze(time.Hour)
		}
		return nil
	})
	start := time.Now()
	b.start(t, h, worker.SnoozeVia(sn))
	// The copy may run before the original's accept is reported: the
	// Snoozer wrote it before it returned.
	fs := b.obs.WaitFor(t, 60*time.Second, "the original accepted, snoozed, and the job done from its copy", func(fs []finished) bool {
		return countPrefix(fs, "job", worker.OutcomeSucceeded) == 1 && countPrefix(fs, "job", worker.OutcomeSnoozed) == 1
	})
	if len(fs) != 2 {
		t.Errorf("want two outcomes, snoozed and succeeded:\n%s", shareqtest.Summary(fs))
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if len(sn.keys) != 1 {
		t.Fatalf("Snoozer got %d copies; want 1", len(sn.keys))
	}
	if want := fmt.Sprintf("%s/0/0@%s/0/0", b.topic, b.topic); sn.keys[0] != want {
		t.Errorf("copy key %q; want %q", sn.keys[0], want)
	}
	if d := sn.dues[0].Sub(start); d < time.Hour-time.Minute || d > time.Hour+time.Minute {
		t.Errorf("copy due %v after the start; want an hour", d)
	}
}

// relaySnoozer is a Snoozer that produces each copy at once, due now, as
// an outbox relay does when the copy is due.
type relaySnoozer struct {
	cl   *kgo.Client
	mu   sync.Mutex
	keys []string
	dues []time.Time
}

func (s *relaySnoozer) Snooze(ctx context.Context, rec *kgo.Record, due time.Time, key string) error {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.dues = append(s.dues, due)
	s.mu.Unlock()
	cp := *rec
	cp.Headers = nil
	for _, h := range rec.Headers {
		if h.Key != handler.NotBeforeHeader {
			cp.Headers = append(cp.Headers, h)
		}
	}
	return s.cl.ProduceSync(ctx, &cp).FirstErr()
}

// countPrefix counts the outcomes (all with outcome 0) of the jobs whose
// record key starts with prefix.
func countPrefix(fs []finished, prefix string, o worker.Outcome) int {
	n := 0
	for _, f := range fs {
		if strings.HasPrefix(f.Key, prefix+"-") && (o == 0 || f.Result.Outcome == o) {
			n++
		}
	}
	return n
}

// waitRenewals waits until the worker has renewed n locks.
func waitRenewals(t *testing.T, obs *shareqtest.Observer, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d lock renewals", n), func() bool {
		ok, _ := obs.Renewals()
		return ok >= n
	})
}

// A job that waits for its key until MaxHold is copied for later (outcome
// snoozed, the original accepted) instead of released: its copy runs on
// its first delivery, when the key's rate allows, and no delivery is
// spent on the wait.
func TestKeyWaitPastMaxHoldIsCopied(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "key-1", "key-2")
	runs := newRuns()
	st := &startTimes{key: "key"}
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		return nil
	})
	// One job of the key per 2.5 s: the second waits past MaxHold (2 s),
	// and its copy, fetched at once, waits for the rest of the interval.
	b.start(t, h, worker.MaxHold(2*time.Second), worker.Observers(st),
		worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey, Rate: 2, Per: 5 * time.Second}))
	fs := b.obs.WaitFor(t, 60*time.Second, "both jobs done", func(fs []finished) bool {
		return countPrefix(fs, "key", worker.OutcomeSucceeded) == 2
	})
	if n := countPrefix(fs, "key", worker.OutcomeSnoozed); n != 1 {
		t.Errorf("%d snoozed outcomes; want 1 (the job that waited past MaxHold):\n%s", n, shareqtest.Summary(fs))
	}
	if n := countPrefix(fs, "key", worker.OutcomeInterrupted) + countPrefix(fs, "key", worker.OutcomeRetried); n != 0 {
		t.Errorf("%d jobs released:\n%s", n, shareqtest.Summary(fs))
	}
	runs.wantFirstDeliveries(t)
	starts := st.get()
	if len(starts) != 2 {
		t.Fatalf("%d runs; want 2", len(starts))
	}
	if gap := starts[1].Sub(starts[0]); gap < 2500*time.Millisecond-20*time.Millisecond {
		t.Errorf("the key's jobs started %v apart; want at least 2.5s", gap)
	}
}

// keyEvents is a KeyObserver that counts breakers opened and closed.
type keyEvents struct {
	shareqtest.Observer
	down, back atomic.Int32
}

func (k *keyEvents) KeyDown(string, string, error)         { k.down.Add(1) }
func (k *keyEvents) KeyBack(string, string, time.Duration) { k.back.Add(1) }

// Twenty keys down at once (a network outage): five lines of their own,
// then a line or two that count the rest, not twenty; the observer hears of
// every one. At the stop the waiting jobs are copied for later, not
// released: no delivery spent.
func TestManyBreakersLogAFewLines(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("k%02d-1", i))
	}
	b.produce(t, keys...)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ko := &keyEvents{}
	h := handler.Func(func(context.Context, *handler.Job) error {
		return handler.KeyUnavailable(errors.New("no route to host"))
	})
	stop := b.start(t, h, worker.Concurrency(20), worker.Logger(logger), worker.Observers(ko),
		worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey}))
	waitFor(t, 60*time.Second, "20 breakers open", func() bool { return ko.down.Load() == 20 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, "a key's destination is down"); n != 5 {
		t.Errorf("%d lines of their own for 20 keys down; want 5:\n%s", n, out)
	}
	// The rest are counted in a summary line at the next reading and at
	// the stop (at most one every 30 s): all 15, in one or two lines.
	down := 0
	for _, m := range regexp.MustCompile(`more keys' destinations went down.* went_down=(\d+)`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		down += n
	}
	if n := strings.Count(out, "more keys' destinations went down"); n < 1 || n > 2 || down != 15 {
		t.Errorf("%d summary lines counting %d keys down; want one or two counting 15:\n%s", n, down, out)
	}
	fs := ko.Events()
	if n := countPrefix(fs, "k00", worker.OutcomeSnoozed); n != 1 || len(fs) != 20 {
		t.Errorf("%d outcomes (k00 snoozed: %d); want 20, each copied for later:\n%s", len(fs), n, shareqtest.Summary(fs))
	}
	for _, f := range fs {
		if f.Result.Ack == worker.AckRelease {
			t.Errorf("job %s released at the stop (%v); want it copied for later", f.Key, f.Result.Err)
		}
	}
}

// A worker that stops while it holds a snoozed job copies the job for
// later instead of releasing it: the next worker runs the copy when it
// is due, on its first delivery.
func TestStopCopiesHeldSnoozes(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job-1")
	runs := newRuns()
	var snoozedAt atomic.Int64
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if job.Snoozes() == 0 {
			snoozedAt.Store(time.Now().UnixNano())
			return handler.Snooze(2 * time.Second)
		}
		return nil
	})
	stop := b.start(t, h)
	waitFor(t, 60*time.Second, "the job snoozed", func() bool { return snoozedAt.Load() != 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	fs := b.obs.Events()
	if len(fs) != 1 || fs[0].Result.Outcome != worker.OutcomeSnoozed {
		t.Fatalf("outcomes at the stop:\n%s\nwant one, snoozed (copied for later)", shareqtest.Summary(fs))
	}
	b.start(t, h)
	fs = b.obs.WaitFor(t, 60*time.Second, "the copy run by the next worker", func(fs []finished) bool {
		return countPrefix(fs, "job", worker.OutcomeSucceeded) == 1
	})
	runs.wantFirstDeliveries(t)
	if ran := time.Unix(0, snoozedAt.Load()).Add(2 * time.Second); fs[len(fs)-1].At.Before(ran) {
		t.Errorf("the copy ran at %v, before its snooze ended at %v", fs[len(fs)-1].At, ran)
	}
}

// holdingSnoozer is a Snoozer that keeps the copies until the test lets
// them go (relay), as an outbox keeps them until they are due.
type holdingSnoozer struct {
	mu   sync.Mutex
	recs []*kgo.Record
	dues []time.Time
}

func (s *holdingSnoozer) Snooze(_ context.Context, rec *kgo.Record, due time.Time, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, rec)
	s.dues = append(s.dues, due)
	return nil
}

func (s *holdingSnoozer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// relay produces every copy kept, as due now.
func (s *holdingSnoozer) relay(t *testing.T, cl *kgo.Client) {
	t.Helper()
	s.mu.Lock()
	recs := s.recs
	s.recs = nil
	s.mu.Unlock()
	for _, r := range recs {
		cp := *r
		cp.Headers = nil
		for _, h := range r.Headers {
			if h.Key != handler.NotBeforeHeader {
				cp.Headers = append(cp.Headers, h)
			}
		}
		if err := cl.ProduceSync(context.Background(), &cp).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// A key whose jobs come faster than its limit lets them run: past the
// worker's bound of waiting jobs (250 here: one partition) its newest waiters go to the
// Snoozer, due when the line ahead of them will have run, so the worker
// keeps fetching the other keys' jobs; once the copies come back every
// job runs once, on delivery 1.
func TestLongKeyLineIsShedToTheSnoozer(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, jobKeys("busy", 400)...)
	b.produce(t, jobKeys("other", 50)...)
	unblock := make(chan struct{})
	runs := newRuns()
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if prefixKey(job) == "busy" {
			select {
			case <-unblock:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	sn := &holdingSnoozer{}
	shedFrom := time.Now()
	b.start(t, h, worker.Concurrency(2), worker.SnoozeVia(sn),
		worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey, Concurrency: 1}))
	b.obs.WaitFor(t, 60*time.Second, "every other job done past the busy key's line", func(fs []finished) bool {
		return countPrefix(fs, "other", worker.OutcomeSucceeded) == 50
	})
	waitFor(t, 60*time.Second, "the line past the bound shed", func() bool { return sn.len() == 400-1-250 })
	// Each copy is due when the line ahead of it will have run: at least
	// a second on, and later the further back it stood.
	sn.mu.Lock()
	first, last := sn.dues[0], sn.dues[0]
	for _, d := range sn.dues {
		if d.Before(shedFrom.Add(time.Second)) {
			t.Errorf("a copy due %v after the worker started; want at least a second", d.Sub(shedFrom))
			break
		}
		first, last = minTime(first, d), maxTime(last, d)
	}
	if !last.After(first) {
		t.Errorf("every copy due at %v: want them spread over the line", first)
	}
	sn.mu.Unlock()
	close(unblock)
	sn.relay(t, b.c.Client(t))
	b.obs.WaitFor(t, 60*time.Second, "every busy job done", func(fs []finished) bool {
		return countPrefix(fs, "busy", worker.OutcomeSucceeded) == 400
	})
	runs.wantFirstDeliveries(t)
	runs.mu.Lock()
	defer runs.mu.Unlock()
	if runs.runs["busy"] != 400 {
		t.Errorf("%d runs of 400 busy jobs", runs.runs["busy"])
	}
}

// A KeyObserver hears its key's breaker open and close also when it is
// one of several observers (the bundle's own is another).
func TestKeyObserverAmongOtherObservers(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, jobKeys("down", 2)...)
	var isDown atomic.Bool
	isDown.Store(true)
	var refused atomic.Int32
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		if isDown.Load() {
			refused.Add(1)
			return handler.KeyUnavailable(errors.New("connect: connection refused"))
		}
		return nil
	})
	ko := &keyEvents{}
	b.start(t, h, worker.Observers(ko), worker.KeyLimit(b.topic, worker.Keys{Key: prefixKey}))
	waitFor(t, 30*time.Second, "a job of the key refused", func() bool { return refused.Load() >= 1 })
	isDown.Store(false)
	b.obs.WaitFor(t, 60*time.Second, "every job done", func(fs []finished) bool {
		return countPrefix(fs, "down", worker.OutcomeSucceeded) == 2
	})
	if d, k := ko.down.Load(), ko.back.Load(); d != 1 || k != 1 {
		t.Errorf("the KeyObserver heard %d openings and %d closings; want 1 and 1", d, k)
	}
}

// failingSnoozer is a Snoozer whose database is down.
type failingSnoozer struct{ calls atomic.Int32 }

func (s *failingSnoozer) Check(context.Context) error {
	return errors.New("the outbox table is not readable")
}

func (s *failingSnoozer) Snooze(context.Context, *kgo.Record, time.Time, string) error {
	s.calls.Add(1)
	return errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
}

// slowSnoozer keeps copies, each after a delay (its database slow).
type slowSnoozer struct {
	delay time.Duration
	calls atomic.Int32
}

func (s *slowSnoozer) Snooze(ctx context.Context, _ *kgo.Record, _ time.Time, _ string) error {
	s.calls.Add(1)
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A copy written slower than the job's MaxHold still ends the job as
// snoozed: the lock is kept for the copy, and no delivery is spent. (A
// copy begun close to MaxHold, by a snooze held until then, is the same
// case with a fast Snoozer under load.)
func TestSlowSnoozerCopyOutlastsMaxHold(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job-1")
	sn := &slowSnoozer{delay: 3 * time.Second}
	h := handler.Func(func(context.Context, *handler.Job) error {
		return handler.Snooze(time.Hour) // past a minute: the Snoozer's at once
	})
	b.start(t, h, worker.MaxHold(2*time.Second), worker.SnoozeVia(sn))
	fs := b.obs.WaitFor(t, 60*time.Second, "the job's end", func(fs []finished) bool { return len(fs) >= 1 })
	if f := fs[0]; f.Result.Outcome != worker.OutcomeSnoozed || f.Result.Ack != worker.AckAccept {
		t.Errorf("outcome %v, ack %v (%v); want snoozed and accepted once its copy is kept", f.Result.Outcome, f.Result.Ack, f.Result.Err)
	}
	if n := sn.calls.Load(); n != 1 {
		t.Errorf("the Snoozer was asked %d times; want 1", n)
	}
}

// A Snoozer that cannot keep a copy (its Postgres down) does not cost the
// job a delivery: the copy is produced to the topic instead, with one
// Warn line, and the job runs from it when it is due, on its first
// delivery. Its failing check at start is one Warn line too.
func TestFailingSnoozerFallsBackToTheTopic(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job-1")
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	runs := newRuns()
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		runs.begin(job)
		defer runs.end(job)
		if job.Snoozes() == 0 {
			return handler.Snooze(4 * time.Second)
		}
		return nil
	})
	sn := &failingSnoozer{}
	// At MaxHold the held snooze is copied, through the Snoozer; the copy
	// is due long enough after MaxHold that no run starts near a MaxHold.
	b.start(t, h, worker.Logger(logger), worker.MaxHold(2*time.Second), worker.SnoozeVia(sn))
	fs := b.obs.WaitFor(t, 60*time.Second, "the job copied and done from its copy", func(fs []finished) bool {
		return countPrefix(fs, "job", worker.OutcomeSucceeded) == 1 && countPrefix(fs, "job", worker.OutcomeSnoozed) >= 1
	})
	for _, f := range fs {
		if f.Result.Ack == worker.AckRelease {
			t.Errorf("released (%v): the failed Snoozer spent a delivery", f.Result.Err)
		}
	}
	runs.wantFirstDeliveries(t)
	if sn.calls.Load() == 0 {
		t.Error("the Snoozer was never asked")
	}
	if n := strings.Count(logs.String(), "the Snoozer could not keep"); n != 1 {
		t.Errorf("%d lines about the Snoozer; want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "the Snoozer cannot keep snoozed jobs' copies"); n != 1 {
		t.Errorf("%d start-up lines about the Snoozer's check; want 1:\n%s", n, logs.String())
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// startTimes is an Observer that notes when the worker starts each job of
// key: on the worker's loop, as it decides, not when the handler's
// goroutine gets to run.
type startTimes struct {
	worker.NopObserver
	key string
	mu  sync.Mutex
	at  []time.Time
}

func (s *startTimes) JobStarted(job *handler.Job) {
	if prefixKey(job) != s.key {
		return
	}
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

func (s *startTimes) get() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at)
}
