package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// rateRefresh is how often the workers of these tests count each other:
// shorter than the default so a joining worker takes its share sooner.
const rateRefresh = 500 * time.Millisecond

// startLog records when each job started, on which worker, and on which
// delivery. The times are the workers' JobStarted, on the goroutine that
// took the job's token: a handler's own clock reading would add its
// goroutine's scheduling delay, which a loaded machine stretches.
type startLog struct {
	mu     sync.Mutex
	at     []time.Time
	counts []int32
	by     map[int]int // jobs started by worker
}

// nop is the handler of these tests: the jobs only count.
var nop = handler.Func(func(context.Context, *handler.Job) error { return nil })

// observer returns worker n's observer, which records its starts.
func (s *startLog) observer(n int) worker.Observer { return startObserver{s, n} }

type startObserver struct {
	*startLog
	n int
}

func (o startObserver) JobStarted(job *handler.Job) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.at = append(o.at, now)
	o.counts = append(o.counts, job.DeliveryCount)
	if o.by == nil {
		o.by = map[int]int{}
	}
	o.by[o.n]++
}

func (startObserver) JobFinished(*handler.Job, worker.Result) {}
func (startObserver) LockRenewed(*handler.Job, error)         {}
func (startObserver) AckFailed(string, int32, error)          {}

func (s *startLog) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

// check fails t if more than most jobs started within any 1 s, or any
// job ran on a delivery other than its first (waiting on the limit spent
// one), and returns the jobs each worker started.
func (s *startLog) check(t *testing.T, most int) map[int]int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	at := slices.Clone(s.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	busiest, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		busiest = max(busiest, i-j+1)
	}
	t.Logf("busiest 1 s: %d starts (at most %d); jobs by worker: %v", busiest, most, s.by)
	if busiest > most {
		t.Errorf("%d jobs started within 1 s, want at most %d", busiest, most)
	}
	for i, c := range s.counts {
		if c != 1 {
			t.Errorf("start %d ran on delivery %d: waiting for the rate limit spent a delivery", i, c)
		}
	}
	return s.by
}

// mostPerSecond is the documented bound: no second holds more than the
// limit and a tenth of it (one job below 10 a second), however many
// workers share it.
func mostPerSecond(limit int) int { return limit + max(1, limit/10) }

func produceJobs(t *testing.T, b *bundle, n int) {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%03d", i)
	}
	b.produce(t, keys...)
}

// A worker with a rate limit of 20 jobs a second, given a backlog of 100
// jobs, starts at most 22 in any second (the limit and a tenth),
// and every job runs on its first delivery: a record it fetched never
// waited into a spent delivery. Its MemberStats show the limit and its
// share.
func TestTopicRateHoldsTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	const jobs, limit = 100, 20
	produceJobs(t, b, jobs)
	var starts startLog
	var stats memberStatsLog
	b.start(t, nop, worker.TopicRate(b.topic, limit, time.Second), worker.RateRefresh(rateRefresh),
		worker.Concurrency(50), worker.Observers(starts.observer(0), &stats))
	b.obs.WaitFor(t, 60*time.Second, "every job done", func([]finished) bool { return starts.len() >= jobs })
	starts.check(t, mostPerSecond(limit))
	if got := starts.len(); got != jobs {
		t.Errorf("%d starts, want %d (each job once)", got, jobs)
	}
	s := stats.waitFor(t, func(s worker.MemberStats) bool { return s.RateShare > 0 })
	if s.RateTopic != b.topic || s.RateLimit != limit || s.RateShare != limit {
		t.Errorf("MemberStats: rate topic %q, limit %v, share %v; want %q, %v, %v", s.RateTopic, s.RateLimit, s.RateShare, b.topic, limit, limit)
	}
}

// Three workers share one limit of 30 jobs a second: two start on a
// backlog, the third joins while they run. The fleet starts at most 33 in
// any second (the limit and a tenth), every job on its first
// delivery, and the joiner gets its share and runs jobs too.
func TestTopicRateIsSharedByTheFleet(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	const jobs, limit = 240, 30
	produceJobs(t, b, jobs)
	var starts startLog
	opts := []worker.Option{worker.TopicRate(b.topic, limit, time.Second), worker.RateRefresh(rateRefresh), worker.Concurrency(20)}
	for n := range 2 {
		b.start(t, nop, append(opts, worker.Observers(starts.observer(n)))...)
	}
	b.obs.WaitFor(t, 60*time.Second, "the first jobs done", func([]finished) bool { return starts.len() >= 40 })
	b.start(t, nop, append(opts, worker.Observers(starts.observer(2)))...)
	b.obs.WaitFor(t, 90*time.Second, "every job done", func([]finished) bool { return starts.len() >= jobs })
	by := starts.check(t, mostPerSecond(limit))
	if got := starts.len(); got != jobs {
		t.Errorf("%d starts, want %d (each job once)", got, jobs)
	}
	for n := range 3 {
		if by[n] == 0 {
			t.Errorf("worker %d started no job (jobs by worker: %v)", n, by)
		}
	}
}

// memberStatsLog is an observer that keeps the latest MemberStats.
type memberStatsLog struct {
	worker.NopObserver
	mu   sync.Mutex
	last []worker.MemberStats
}

func (m *memberStatsLog) MemberStats(s worker.MemberStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = append(m.last, s)
}

// waitFor returns the first snapshot that satisfies ok, waiting up to
// 30 s for one.
func (m *memberStatsLog) waitFor(t *testing.T, ok func(worker.MemberStats) bool) worker.MemberStats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.mu.Lock()
		for _, s := range m.last {
			if ok(s) {
				m.mu.Unlock()
				return s
			}
		}
		m.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no MemberStats as wanted within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A topic rate changed at run time (control.Client.SetLimit) takes
// effect on every worker of the fleet at the moment the limit names: two
// workers sharing 5 jobs a second never start more than 6 in a second
// before it, start more than that after it, and never more than the new
// rate's bound; every job runs on its first delivery, and MemberStats
// show the new limit.
func TestTopicRateChangedAtRunTime(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	const jobs, from, to = 300, 5, 40
	produceJobs(t, b, jobs)
	cd := newControlled(t, b.c)
	var starts startLog
	var stats memberStatsLog
	opts := []worker.Option{worker.TopicRate(b.topic, from, time.Second), worker.RateRefresh(rateRefresh), worker.Concurrency(20),
		worker.ControlTopic(cd.topic)}
	b.start(t, nop, append(opts, worker.Observers(starts.observer(0), &stats))...)
	b.start(t, nop, append(opts, worker.Observers(starts.observer(1)))...)
	b.obs.WaitFor(t, 60*time.Second, "the first jobs done", func([]finished) bool { return starts.len() >= 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	set := control.Limit{Group: b.group, Topic: b.topic, Rate: &control.Rate{N: to, Per: time.Second}, Reason: "quota raised", By: "tester", At: time.Now()}
	if err := cd.ctl.SetLimit(ctx, set); err != nil {
		t.Fatal(err)
	}
	switchAt := set.At.Add(control.RateSwitch)
	b.obs.WaitFor(t, 90*time.Second, "every job done", func([]finished) bool { return starts.len() >= jobs })
	starts.check(t, mostPerSecond(to))
	starts.mu.Lock()
	at := slices.Clone(starts.at)
	starts.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	before := slices.DeleteFunc(slices.Clone(at), func(a time.Time) bool { return !a.Before(switchAt) })
	if most := busiest(before); most > mostPerSecond(from) {
		t.Errorf("%d starts in one second before the switch; want at most %d", most, mostPerSecond(from))
	}
	faster := time.Duration(-1)
	for i, j := 0, 0; i < len(at); i++ {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		if i-j+1 > mostPerSecond(from) {
			faster = at[i].Sub(switchAt)
			break
		}
	}
	if faster < 0 {
		t.Fatalf("no second after the switch held more than %d starts: the new rate never took effect", mostPerSecond(from))
	}
	t.Logf("the first second with more starts than the old rate allows ended %v after the switch (%v after SetLimit)", faster.Round(time.Millisecond), (faster + control.RateSwitch).Round(time.Millisecond))
	s := stats.waitFor(t, func(s worker.MemberStats) bool { return s.RateLimit == to })
	t.Logf("MemberStats after the switch: limit %v, share %v", s.RateLimit, s.RateShare)
}

// busiest is the most of the sorted times at within any 1 s.
func busiest(at []time.Time) int {
	most, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}
