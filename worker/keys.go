package worker

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/shareq/shareq/handler"
)

// Key limits in the executor (KeyLimit): a job of a key at its limit
// waits (jobWaiting) without a handler slot, its lock renewed by the
// tracker, and spends no delivery; jobs of other keys start past it. A
// key's jobs start in the order they came. A key's state exists while it
// has jobs in hand, an open breaker or a rate interval not over, so the
// executor's memory follows the jobs it holds, not the keys there are.
const (
	// breakerFirst is the delay from a key's breaker opening to its
	// first probe; each probe that finds the key still down doubles it,
	// up to breakerMax.
	breakerFirst = time.Second
	breakerMax   = 30 * time.Second
	// The jobs that wait for their keys (and the snoozed ones held in
	// place) are bounded at waitingPerPartition per partition assigned
	// (an eighth of a share partition's default in-flight window of
	// 2,000 records, so that what waits in one worker never stalls a
	// partition), or waitingPerSlot per handler slot, or waitingMin,
	// whichever is most: past it they count against the credit, so a
	// key whose jobs come faster than it may run them slows the
	// fetching instead of filling the worker. Their bytes are within
	// MaxBytesInHand as every record in hand is.
	waitingPerPartition = 250
	waitingPerSlot      = 16
	waitingMin          = 64
)

// keyID names a key of a topic.
type keyID struct{ topic, key string }

// keyState is one key's limits in use, owned by the run loop.
type keyState struct {
	id      keyID
	l       *keyLimit
	refs    int       // jobs in hand whose key this is (xjob.ks), whatever their state
	running int       // jobs of the key running (each counted once, keyRunning)
	waiting []*xjob   // jobs waiting for the key, oldest first; entries no longer waiting are skipped
	pending int       // waiting jobs moved to the executor's ready line, not started yet
	next    time.Time // the rate's earliest next start; zero: now
	timerAt time.Time // a key timer is set for then (keyHeap); zero: none

	// The breaker.
	fails   int // retryable failures in a row
	open    bool
	since   time.Time
	delay   time.Duration
	probeAt time.Time
	probe   *xjob
	waited  int   // jobs that waited while it was open
	lastErr error // what opened it
	logged  bool  // its opening had a line of its own (breakerLog)

	avgRun time.Duration // moving average of its handlers' run times, for shed
}

// breakerLog keeps the breakers' lines to what an operator reads during
// an outage: a line for each key's breaker that opens (and one when it
// closes) up to breakerLines a minute; past that, one line every
// breakerSummaryEvery counts the keys that went down and came back.
type breakerLog struct {
	window         time.Time // start of the minute being counted
	lines          int       // lines of their own in the window
	opened, closed int       // not logged on their own since the last summary
	summaryAt      time.Time
}

const (
	breakerLines        = 5
	breakerSummaryEvery = 30 * time.Second
)

// own reports whether a breaker that opens now gets a line of its own.
func (b *breakerLog) own(now time.Time) bool {
	if now.Sub(b.window) >= time.Minute {
		b.window, b.lines = now, 0
	}
	if b.lines >= breakerLines {
		return false
	}
	b.lines++
	return true
}

// summarize logs the breakers not logged on their own, at most once per
// breakerSummaryEvery (final: now).
func (x *executor) summarizeBreakers(now time.Time, final bool) {
	b := &x.blog
	if b.opened+b.closed == 0 || (!final && now.Sub(b.summaryAt) < breakerSummaryEvery) {
		return
	}
	x.log.Warn("more keys' destinations went down or came back (each key's own lines are limited to 5 a minute)",
		"went_down", b.opened, "came_back", b.closed, "breakers_open", x.breakersOpen)
	b.opened, b.closed, b.summaryAt = 0, 0, now
}

// baseFor is the context j's handler runs under: the worker's, marked
// for the key breaker on a topic with a key limit (the dlq middleware
// parks no job whose key's breaker holds it).
func (x *executor) baseFor(j *xjob) context.Context {
	if x.limits[j.job.Topic] != nil {
		return x.keyBase
	}
	return x.base
}

// keyOf finds j's key state, creating it, when its topic has a key limit
// and its Key function gives a key, and counts j as one of its jobs in
// hand (refs; end uncounts it).
func (x *executor) keyOf(j *xjob) *keyState {
	l := x.limits[j.job.Topic]
	if l == nil {
		return nil
	}
	k, err := l.keyOf(&j.job)
	if err != nil {
		x.log.Error("key limit: no key for the job; it runs without a key limit", "record", j.key(), "error", err)
		return nil
	}
	if k == "" {
		return nil
	}
	id := keyID{topic: j.job.Topic, key: k}
	ks := x.keys[id]
	if ks == nil {
		ks = &keyState{id: id, l: l}
		x.keys[id] = ks
	}
	ks.refs++
	return ks
}

// hasWaiters reports whether jobs of ks wait (or are on their way to
// start from the ready line): a newer job of the key waits behind them.
func (ks *keyState) hasWaiters() bool {
	if ks.pending > 0 {
		return true
	}
	for _, j := range ks.waiting {
		if j.state == jobWaiting {
			return true
		}
	}
	return false
}

// mayStart reports whether one more job of ks may start now, by its
// limits, counting the waiters let go that have not started yet; probe
// says the breaker lets it start as its probe.
func (ks *keyState) mayStart(now time.Time) (ok, probe bool) {
	if ks.open {
		if ks.probe != nil || ks.pending > 0 || now.Before(ks.probeAt) {
			return false, false
		}
		probe = true
	}
	if ks.l.conc > 0 && ks.running+ks.pending >= ks.l.conc {
		return false, false
	}
	if ks.l.every > 0 && (ks.pending > 0 || now.Before(ks.next)) {
		return false, false
	}
	return true, probe
}

// admit takes j's start from its key's limits, or has j wait for its key;
// fromLine says j comes from the ready line (a waiter let go), not the
// queue.
func (x *executor) admit(j *xjob, now time.Time, fromLine bool) bool {
	ks := j.ks
	if ks == nil {
		return true
	}
	if fromLine {
		ks.pending--
	} else if ks.hasWaiters() {
		x.waitForKey(j, now, false)
		return false
	}
	ok, probe := ks.mayStart(now)
	if !ok {
		x.waitForKey(j, now, fromLine)
		return false
	}
	if probe {
		ks.probe = j
	}
	ks.running++
	j.keyRunning = true
	if ks.l.every > 0 {
		ks.next = maxTime(ks.next, now).Add(ks.l.every)
	}
	if ks.hasWaiters() {
		x.keyTimer(ks, now)
	}
	return true
}

// waitForKey has j wait for its key: at the head of its line if it was
// let go already (or ran as a probe), else at the end.
func (x *executor) waitForKey(j *xjob, now time.Time, head bool) {
	ks := j.ks
	if j.state == jobQueued {
		// Out of the queue without a slot: the job rate (and so the
		// prefetch) counts it as a job taken, so that a worker whose
		// records go to wait keeps fetching the other keys' at speed.
		x.queued--
		x.completed++
	}
	j.state = jobWaiting
	x.waiting++
	if ks.open {
		ks.waited++
	}
	if head {
		ks.waiting = append([]*xjob{j}, ks.waiting...)
	} else {
		ks.waiting = append(ks.waiting, j)
	}
	if !j.ran {
		x.track(j, now) // a job that ran is in the tracker since its start, or young (trackLater)
	}
	x.keyTimer(ks, now)
}

// keyTimer arms a wake-up for when ks may let a waiter go, if that is a
// time (a rate interval, a probe) and not a running job's end.
func (x *executor) keyTimer(ks *keyState, now time.Time) {
	var at time.Time
	switch {
	case ks.pending > 0:
		return // the waiter let go starts, or waits again, and looks then
	case ks.open && ks.probe == nil:
		at = ks.probeAt
	case ks.open:
		return // the probe's end decides
	case ks.l.conc > 0 && ks.running >= ks.l.conc:
		return // a running job's end lets the next go
	case ks.l.every > 0 && now.Before(ks.next):
		at = ks.next
	default:
		at = now
	}
	if !ks.timerAt.IsZero() && !at.Before(ks.timerAt) {
		return
	}
	ks.timerAt = at
	heap.Push(&x.keyTimes, keyTime{at: at, ks: ks})
	x.arm(at)
}

// keyFreed lets the next waiters of ks go to the ready line as far as its
// limits allow now, and forgets ks once nothing of it is left.
func (x *executor) keyFreed(ks *keyState, now time.Time) {
	for {
		for len(ks.waiting) > 0 && ks.waiting[0].state != jobWaiting {
			ks.waiting[0] = nil
			ks.waiting = ks.waiting[1:]
		}
		if len(ks.waiting) == 0 {
			ks.waiting = nil
			x.forgetKey(ks, now)
			return
		}
		if ok, _ := ks.mayStart(now); !ok {
			x.keyTimer(ks, now)
			return
		}
		j := ks.waiting[0]
		ks.waiting[0] = nil
		ks.waiting = ks.waiting[1:]
		ks.pending++
		x.ready = append(x.ready, j)
	}
}

// forgetKey drops the state of ks when nothing depends on it: no job of
// it in hand, its breaker closed and its rate interval over. A job in
// hand keeps it whatever the job's state (queued, snoozed, held): had a
// snoozed or queued job kept a state no longer in x.keys, a newer job of
// its key would get a second one, and the two would count the key's
// running jobs apart, each up to its limit.
func (x *executor) forgetKey(ks *keyState, now time.Time) {
	if ks.refs > 0 {
		return // end looks again when the last of them is done with
	}
	if ks.running > 0 || ks.pending > 0 || len(ks.waiting) > 0 || ks.open || ks.next.After(now) {
		if !ks.open && ks.running == 0 && ks.pending == 0 && len(ks.waiting) == 0 {
			x.keyTimer(ks, now) // look again when the interval is over
		}
		return
	}
	if x.keys[ks.id] == ks {
		delete(x.keys, ks.id)
	}
}

// keyStopped ends j's count against its key's concurrency: its handler
// returned or the job ended.
func (x *executor) keyStopped(j *xjob, now time.Time) {
	if !j.keyRunning {
		return
	}
	j.keyRunning = false
	j.ks.running--
	x.keyFreed(j.ks, now)
}

// keysDue lets go the waiters of keys whose timers are due.
func (x *executor) keysDue(now time.Time) {
	for len(x.keyTimes) > 0 && !x.keyTimes[0].at.After(now) {
		kt := heap.Pop(&x.keyTimes).(keyTime)
		if !kt.ks.timerAt.Equal(kt.at) {
			continue // a newer timer replaced it
		}
		kt.ks.timerAt = time.Time{}
		x.keyFreed(kt.ks, now)
	}
}

// startReady starts the waiters let go, oldest first, while slots are
// free and the topic's rate (TopicRate) gives a token; one its key no
// longer admits waits again at the head of its line. A token taken for
// a job that does not start is not given back: the rate is under-used
// then, never exceeded.
func (x *executor) startReady() {
	now := x.now()
	for x.running < x.conc && len(x.ready) > 0 && x.cfg.Rate.take(now) {
		j := x.ready[0]
		x.ready[0] = nil
		x.ready = x.ready[1:]
		if j.state != jobWaiting || x.jobs.Get(j.key()) != j {
			j.ks.pending--
			x.keyFreed(j.ks, now)
			continue
		}
		if x.topicPaused(j.job.Topic) {
			if j.ks != nil {
				j.ks.pending--
				x.keyFreed(j.ks, now)
			}
			x.halt(j, now) // waits for its topic's pause, then for its key again
			continue
		}
		x.waiting--
		if !x.admit(j, now, true) {
			continue
		}
		switch {
		case j.ran:
			x.rerun(j)
		case j.tracked && now.Sub(j.held.heldSince) > x.cfg.MaxHold/2:
			// It waited more than half of MaxHold, which counts from
			// its wait: a copy for now gives its run a whole MaxHold.
			x.keyStopped(j, now)
			j.state = jobWaiting // counted again, for copyOut
			x.waiting++
			x.copyOut(j, now)
		default:
			x.begin(j, now)
		}
	}
	if len(x.ready) == 0 {
		x.ready = nil
	}
}

// keyResult applies a handler's outcome to its key: counts failures in a
// row, opens the breaker or keeps it open, or closes it (a probe that
// did not find the key down). It
// returns true when the job found its key down: it is to wait for the
// breaker, not be released.
func (x *executor) keyResult(j *xjob, err error, took time.Duration, now time.Time) (down bool) {
	ks := j.ks
	if ks == nil {
		return false
	}
	if ks.avgRun == 0 {
		ks.avgRun = took
	} else {
		ks.avgRun += time.Duration(rateWeight * float64(took-ks.avgRun))
	}
	probe := ks.probe == j
	if probe {
		ks.probe = nil
	}
	var ku *handler.KeyUnavailableError
	down = err != nil && errors.As(err, &ku) && !handler.IsPermanent(err)
	failed := err != nil && !handler.IsPermanent(err) && !doneWith(err) && !handler.IsUnavailable(err)
	switch {
	case down:
		ks.fails++
	case failed && ks.l.breakAfter > 0:
		ks.fails++
		down = ks.fails >= ks.l.breakAfter
	default:
		ks.fails = 0
	}
	switch {
	case down && !ks.open:
		x.openBreaker(ks, err, now)
	case down && probe:
		ks.delay = min(2*ks.delay, breakerMax)
		ks.probeAt = now.Add(ks.delay)
		ks.lastErr = err
	case !down && ks.open && probe:
		// Only a probe's answer counts: a job that ran when the breaker
		// opened says nothing of the key since.
		x.closeBreaker(ks, now)
	}
	return down
}

// openBreaker opens ks's breaker: its jobs wait until a probe gets
// through.
func (x *executor) openBreaker(ks *keyState, err error, now time.Time) {
	ks.open, ks.since, ks.delay, ks.lastErr, ks.waited = true, now, breakerFirst, err, 0
	ks.probeAt = now.Add(ks.delay)
	x.breakersOpen++
	ks.logged = x.blog.own(now)
	if ks.logged {
		x.log.Warn("a key's destination is down: its jobs wait, spending no delivery, while one probes it now and then; other keys run on",
			"topic", ks.id.topic, "key", ks.id.key, "error", err.Error(), "running", ks.running)
	} else {
		x.blog.opened++
	}
	if ko, ok := x.obs.(KeyObserver); ok {
		ko.KeyDown(ks.id.topic, ks.id.key, err)
	}
}

// closeBreaker closes ks's breaker: a probe got through.
func (x *executor) closeBreaker(ks *keyState, now time.Time) {
	down := now.Sub(ks.since)
	ks.open, ks.probe, ks.lastErr = false, nil, nil
	x.breakersOpen--
	if ks.logged {
		x.log.Info("a key's destination is back; its jobs run again",
			"topic", ks.id.topic, "key", ks.id.key, "down_for", down.Round(time.Millisecond), "jobs_waited", ks.waited)
	} else {
		x.blog.closed++
	}
	if ko, ok := x.obs.(KeyObserver); ok {
		ko.KeyBack(ks.id.topic, ks.id.key, down)
	}
}

// waitingOver is how many jobs wait for their keys or snoozes past the
// bound: they count against the credit.
func (x *executor) waitingOver() int {
	return max(0, x.waiting+x.snoozed-x.waitingBound())
}

func (x *executor) waitingBound() int {
	return max(waitingMin, waitingPerSlot*x.conc, waitingPerPartition*x.partitions)
}

// shedMax bounds how far ahead shed schedules a copy.
const shedMax = time.Hour

// shed keeps the worker fetching for the other keys when one key's line
// grows past the bound (its jobs come faster than its limits let them
// run): with a Snoozer, the newest waiters of the longest line are
// copied to it, each due about when the line ahead of it will have run,
// and accepted. Without one the bound slows the fetching instead
// (waitingOver): a copy produced to the topic would be fetched again at
// once.
func (x *executor) shed(now time.Time) {
	if x.cfg.Snoozer == nil || x.stopping() {
		return
	}
	over := x.waiting - x.waitingBound()
	if over <= 0 {
		return
	}
	var longest *keyState
	for _, ks := range x.keys {
		if longest == nil || len(ks.waiting) > len(longest.waiting) {
			longest = ks
		}
	}
	if longest == nil {
		return
	}
	ks := longest
	for over > 0 && len(ks.waiting) > 1 {
		i := len(ks.waiting) - 1
		j := ks.waiting[i]
		ks.waiting[i] = nil
		ks.waiting = ks.waiting[:i]
		if j.state != jobWaiting {
			continue
		}
		x.copyOut(j, now.Add(ks.wait(i)))
		over--
	}
}

// wait estimates how long the job at place i of ks's line waits: the jobs
// ahead of it at the key's concurrency and run time, or its rate,
// whichever is slower; at least a second, at most shedMax.
func (ks *keyState) wait(i int) time.Duration {
	conc := max(ks.l.conc, 1)
	d := time.Duration(i/conc+1) * max(ks.avgRun, 10*time.Millisecond)
	if r := time.Duration(i+1) * ks.l.every; r > d {
		d = r
	}
	return min(max(d, time.Second), shedMax)
}

// keyTime is a key's timer.
type keyTime struct {
	at time.Time
	ks *keyState
}

// keyHeap orders key timers by time (container/heap).
type keyHeap []keyTime

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, k int) bool { return h[i].at.Before(h[k].at) }
func (h keyHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *keyHeap) Push(v any)        { *h = append(*h, v.(keyTime)) }
func (h *keyHeap) Pop() any {
	old := *h
	n := len(old)
	kt := old[n-1]
	old[n-1] = keyTime{}
	*h = old[:n-1]
	return kt
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
