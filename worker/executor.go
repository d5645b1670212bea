package worker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/jobctx"
	"github.com/shareq/shareq/internal/member"
	"github.com/shareq/shareq/internal/safehandle"
	"github.com/shareq/shareq/renew"
)

// groupMember is the share-group member as the executor uses it: *member.Member,
// or a fake in tests.
type groupMember interface {
	Events() <-chan member.Event        // deliveries, renewal results, ack results, lost locks; closed when the member stops
	Grant(n int)                        // n more records may be fetched (credits; each delivered record uses one)
	Ack(k member.Key, t member.AckType) // terminal ack; never blocks; result in a later Event.Acked
	Renew(keys ...member.Key)           // never blocks; one Renewal per key in a later Event
	StopFetching()                      // no more fetches
	PauseTopics(topics []string)        // fetch nothing of these topics until a later call leaves them out
	Quiet() <-chan struct{}             // closed once, after StopFetching, when no fetch is in flight and all fetched records were sent on Events
	Leave()                             // final acks + release of everything still held, leave the group; Events closes after
	Stats() member.Stats                // FetchRTT etc.
}

const (
	// renewRetry is how long after a failed renewal the next is sent,
	// while the lock has not run out.
	renewRetry = 250 * time.Millisecond
	// prefetchEvery is how often the executor measures its job rate and
	// recomputes the prefetch.
	prefetchEvery = 250 * time.Millisecond
	// fetchesAhead is how many fetch round trips of jobs the prefetch
	// covers at the observed rate: a fetch brings what the jobs finished
	// while the one before it was out, so a session with one request at a
	// time needs records for several round trips to never wait for
	// credit, and its fetches grow with the rate instead of staying at the
	// handful of slots that free up during one round trip.
	fetchesAhead = 4
	// prefetchHorizon is the least time of jobs, at the observed rate,
	// the prefetch covers: a fetch also waits for the member's own work
	// between requests, which the round trip does not show (on an
	// in-process broker it is most of the cycle).
	prefetchHorizon = 10 * time.Millisecond
	// prefetchMax is the hard ceiling of the prefetch, in records beyond
	// Concurrency, whatever the rate.
	prefetchMax = 4096
	// rateWeight is the weight of the latest reading in the job rate's
	// moving average (a time constant of about a second).
	rateWeight = 0.25
	// ackWarnEvery bounds the warnings about failed acknowledgements to
	// one line per period, with a count of those left out.
	ackWarnEvery = 5 * time.Second
	// stuckWarnEvery is how often a stopped executor says it still waits
	// for handlers that ignore their cancelled context.
	stuckWarnEvery = 5 * time.Second
)

// jobState is where a job is in the executor.
type jobState int8

const (
	jobQueued  jobState = iota + 1 // delivered, waiting for a handler slot
	jobRunning                     // its handler runs
	jobHeld                        // its handler failed; held for the retry backoff
	jobPaused                      // its handler reported a dependency down; held for the pause (pause.go)
	jobWaiting                     // waits for its key's limits or breaker (keys.go), or on the ready line
	jobSnoozed                     // held until its snooze is due (snooze.go)
	jobCopying                     // its copy for later is being written; then ACCEPTed (snooze.go)
	jobHalted                      // its topic is paused by an operator; waits without a slot (topicpause.go)
	jobGone                        // acknowledged or dropped; not in the executor's map
)

// xjob is one delivered record and its job, owned by the run loop. The
// handler goroutine reads only ctx, h and job, which are set before it
// starts and not written after.
type xjob struct {
	job     handler.Job
	ctx     context.Context
	h       handler.Handler
	timeout time.Duration // the topic's job timeout; 0: none
	cancel  context.CancelCauseFunc

	key      member.Key
	state    jobState
	count    int32         // the newest delivery count (a redelivery raises it)
	deadline time.Time     // the lock deadline as far as the executor knows
	lock     time.Duration // the lock duration of the newest delivery
	start    time.Time     // when its handler first started on this delivery (MaxHold counts from it)
	ran      bool
	// tracked: taken by the tracker before it ran (queued through a
	// pause, waiting or snoozed), MaxHold counting from heldSince; a
	// start keeps that entry.
	tracked bool
	reheld  bool // given one more MaxHold for its copy (wakeUp)

	ks         *keyState // its key under the topic's KeyLimit; nil: none
	keyRunning bool      // counted in ks.running
	heldSince  time.Time // when the tracker took it (tracked), MaxHold counting from then

	// A held job is released at releaseAt with its handler's outcome.
	releaseAt time.Time
	err       error
	took      time.Duration
}

// last reports whether the record is on its last delivery.
func (j *xjob) last() bool {
	return j.job.DeliveryLimit > 0 && j.count >= j.job.DeliveryLimit
}

// xresult is a handler's outcome.
type xresult struct {
	j    *xjob
	err  error
	took time.Duration
	// parked is where the dlq middleware parked the job (the chain
	// returned a *handler.ParkedError; err is then nil); nil otherwise.
	parked *handler.DeadLetter
	// cancelled: the idempotency middleware found the job cancelled and
	// did not run its handler (the chain returned a
	// *handler.CancelledError; err is then nil).
	cancelled bool
	// snooze is how long the handler snoozed the job for
	// (*handler.SnoozeError; err is then nil); 0: not snoozed.
	snooze time.Duration
}

// executor runs the handlers for one share-group member's deliveries and
// decides every acknowledgement. One goroutine, the one in run, owns all
// of its state but the fields marked otherwise; handlers run on
// goroutines it starts and waits for, and hand their outcomes back on
// done.
//
// It stops in this sequence, the order the soak showed necessary; each
// step is a phase (executor_stop.go), and run and executor_stop.go take
// them in this order:
//
//  1. ctx is done (beginStop, phaseDraining): fetch no more and grant no
//     more credit; run what is delivered, the records the fetch in flight
//     brings too (they are held by this member, and releasing them would
//     cost a delivery); hold failed jobs, without a backoff.
//  2. The member is quiet (releaseHeld, phaseReleasing): take every
//     record it sent on Events, then release the jobs held for retry,
//     only now, so that no fetch of this member can take a released
//     record on its last delivery and have it archived unhandled.
//  3. The shutdown deadline passes (expire, phaseExpired): cancel the
//     running handlers and release every record in hand. It may come
//     before step 2, which then changes nothing.
//  4. After step 2 or 3, once no job is left (leaveWhenDone, phaseLeft):
//     Leave, which sends the final acknowledgements and leaves the group;
//     Events closes after.
//  5. Events closed (finishStop): end the pauses, log what is left to
//     log, and wait for every handler goroutine and copy.
//
// If Events closes before step 4, the member stopped on its own:
// memberFailed drops every job and the executor goes on at step 5.
type executor struct {
	cfg  executorConfig
	m    groupMember // the share-group member whose deliveries it runs
	log  *slog.Logger
	obs  Observer
	conc int

	jobs    map[member.Key]*xjob // queued, running and held jobs
	queue   fifo                 // queued jobs without priorities (lanes nil); dropped ones are skipped
	lanes   *topicQueues         // queued jobs by topic, with priorities (priority.go); nil: none
	queued  int                  // queued jobs (entries of queue still queued)
	running int                  // handlers running, abandoned ones included: each holds a slot
	tracker *renew.Tracker[member.Key]
	holds   holdHeap // held jobs by releaseAt; dropped ones are skipped

	// The pause (pause.go): non-nil while a dependency is down.
	pause  *pause
	reruns []*xjob // paused jobs to run again now that the pause is over, oldest first

	// Operator pauses (topicpause.go).
	topicPauses map[string]TopicPause // by topic: the pauses in effect
	haltLine    []*xjob               // jobs waiting for their topic's pause, oldest first; entries no longer halted are skipped
	halted      int                   // jobs in state jobHalted

	// Key limits (keys.go) and snoozes (snooze.go).
	limits       map[string]*keyLimit // by topic
	limitNoted   map[string]time.Time // by topic: the At of the limit set at run time noteUnlimited logged
	keys         map[keyID]*keyState
	keyTimes     keyHeap
	ready        []*xjob // waiters let go (jobWaiting), to start before the queue
	waiting      int     // jobs in state jobWaiting
	snoozed      int     // jobs in state jobSnoozed
	copying      int     // jobs in state jobCopying, and copies not taken yet
	breakersOpen int
	partitions   int // assigned to the member, as of the last reading (waitingBound)
	blog         breakerLog
	keyBase      context.Context // base, marked for the key breaker
	copySignal   chan struct{}
	copyMu       sync.Mutex
	copyDone     []copyResult // copies written (or failed), for takeCopies
	copiers      conc.WaitGroup
	// snoozerWarnAt is when warnSnoozer last logged.
	snoozerWarnAt time.Time

	// Credits: outstanding were granted and not yet used by a delivery;
	// below 0, a debt: the member delivered that many past the credit
	// (member.Delivery, batch_optimized fetches). The executor keeps
	// running + queued + outstanding at conc + prefetch, and grants
	// nothing while stopping.
	outstanding int
	prefetch    int
	completed   int     // handler returns, and queued jobs that went to wait for their keys, since the last prefetch reading
	rate        float64 // moving average of handler returns per second
	lastReading time.Time
	lockSeen    time.Duration // the longest lock of any delivery

	work    chan *xjob // to the handler goroutines
	done    chan xresult
	spawned int // handler goroutines started
	wg      sync.WaitGroup
	base    context.Context // run's context without its cancellation

	wake   *time.Timer // the next renewal, MaxHold or end of a retry hold
	wakeAt time.Time
	armed  bool
	// trackerAt is the earliest time the tracker may have something due
	// (trackerSet false: nothing); only then does a wake-up scan it.
	trackerAt  time.Time
	trackerSet bool

	// phase is the step of the stop sequence the executor is at
	// (executor_stop.go); only enter changes it.
	phase phase
	// quiet: the member's Quiet closed before the deadline (set by enter
	// on phaseReleasing). It says no more than the phase wherever it is
	// read, and is kept only because halt (topicpause.go) reads it by this
	// name: x.quiet there is x.phase >= phaseReleasing.
	quiet bool

	ackWarnAt   time.Time
	ackWarnLeft int // failed acknowledgements not logged yet
	ackWarnLast error

	// outcomes counts finished deliveries by outcome, for the worker's
	// stop line; read after run returned.
	outcomes map[Outcome]int64

	// running and queued as of the last reading, for MemberStats: the
	// only fields other goroutines read.
	pubRunning, pubQueued               atomic.Int64
	pubWaiting, pubSnoozed, pubBreakers atomic.Int64
	pubHalted                           atomic.Int64
}

// executorConfig is everything the executor takes from outside: the
// worker's settings, its handlers, and the callbacks by which it fills in
// jobs and publishes its pause.
type executorConfig struct {
	Group           string
	Concurrency     int
	ShutdownTimeout time.Duration // how long handlers may finish after ctx is done
	RenewMargin     time.Duration // renew a running job's lock this long before it runs out; 0 or more than half the lock: at half
	MaxHold         time.Duration // the longest a job holds its record
	// RetryBackoff is how long a failed job is held before its release,
	// by delivery count; nil: released at once.
	RetryBackoff  func(delivery int32) time.Duration
	DeliveryLimit func() int32 // the group's delivery limit as the start-up check found it; 0: unknown

	Handlers map[string]handler.Handler // by topic, middleware applied
	Timeouts map[string]time.Duration   // job timeout by topic; absent or 0: none
	Limits   map[string]*keyLimit       // key limits by topic; absent: none

	// Snoozer keeps long snoozes' copies; nil: they are produced to the
	// topic with Produce (nil too: a copy fails, and its job is released).
	Snoozer Snoozer
	Produce func(ctx context.Context, rec *kgo.Record, done func(*kgo.Record, error))

	Logger   *slog.Logger // the worker's logger, carried on every job's context
	Observer Observer     // nil: none
	// DependenciesDown is called with the dependencies down whenever the
	// pause changes, with nil when it ends.
	DependenciesDown func(deps []string)
	// Rate is the topic's rate limit (rate.go): credits are granted and
	// queued jobs started only as its tokens allow. nil: none.
	Rate *rateLimiter
	// InitialControl is the control topic's state at the start: the
	// operator's pauses (topicpause.go) and limits (livelimits.go) in
	// force; Controls brings it each time it changes (nil: never).
	InitialControl control.State
	Controls       <-chan control.State
	// TopicsPaused is called with the topics paused whenever they
	// change, nil when none is; nil: not called.
	TopicsPaused func([]TopicPause)
	// Queues are the per-topic queues of the worker's priorities
	// (priority.go), owned by the executor given this config from then
	// on; nil: no priorities, one FIFO.
	Queues *topicQueues
}

// executorConfig is the executor's config for this worker.
func (w *Worker) executorConfig() executorConfig {
	c := newExecutorConfig(w.cfg, w.handlers, w.timeouts)
	c.DeliveryLimit = w.deliveryLimit.Load
	c.DependenciesDown = func(deps []string) {
		if deps == nil {
			w.down.Store(nil)
			return
		}
		w.down.Store(&deps)
	}
	c.Controls = w.controls
	c.TopicsPaused = func(ps []TopicPause) {
		if ps == nil {
			w.paused.Store(nil)
			return
		}
		w.paused.Store(&ps)
	}
	return c
}

// newExecutorConfig is the executor's config for the settings of cfg and
// the given handlers; the caller sets DeliveryLimit and DependenciesDown.
func newExecutorConfig(cfg *config, handlers map[string]handler.Handler, timeouts map[string]time.Duration) executorConfig {
	return executorConfig{
		Group: cfg.group, Concurrency: cfg.concurrency, ShutdownTimeout: cfg.shutdownTimeout,
		RenewMargin: cfg.renewMargin, MaxHold: cfg.maxHold, RetryBackoff: cfg.retryBackoff,
		Handlers: handlers, Timeouts: timeouts, Limits: cfg.keyLimitsByTopic(), Snoozer: cfg.snoozer,
		Logger: cfg.logger, Observer: cfg.observer, Queues: cfg.topicQueues(),
	}
}

func newExecutor(cfg executorConfig, m groupMember) *executor {
	conc := cfg.Concurrency
	return &executor{
		cfg:      cfg,
		m:        m,
		log:      cfg.Logger.With("group", cfg.Group),
		obs:      cfg.Observer,
		conc:     conc,
		jobs:     make(map[member.Key]*xjob, 2*conc),
		outcomes: make(map[Outcome]int64),
		tracker:  renew.NewTracker[member.Key](renew.Policy{Margin: cfg.RenewMargin, MaxHold: cfg.MaxHold}),
		work:     make(chan *xjob, conc),
		done:     make(chan xresult, conc),
		limits:   cfg.Limits,
		lanes:    cfg.Queues,
		keys:     make(map[keyID]*keyState),

		topicPauses: make(map[string]TopicPause),
		// copySignal wakes the run loop for written copies (copied).
		copySignal: make(chan struct{}, 1),
	}
}

// run runs jobs until ctx is done, then takes the steps of the stop
// sequence (executor) in order, and returns once every handler goroutine
// it started has returned (logging a Warn every 5 s while handlers ignore
// their cancelled context). The signals of steps 1 to 3 are the last
// cases of its loop; step 4 ends every turn; step 5 follows the loop.
func (x *executor) run(ctx context.Context) {
	// Every job's context carries the worker's logger, for middleware
	// built without one (handler.Logger).
	x.base = handler.WithLogger(jobctx.WithWorker(context.WithoutCancel(ctx)), x.cfg.Logger)
	x.keyBase = jobctx.WithKeyBreaker(x.base)
	x.wake = time.NewTimer(time.Hour)
	x.wake.Stop()
	defer x.wake.Stop()
	defer x.cfg.Rate.stop()
	defer x.pubRunning.Store(0)
	defer x.pubQueued.Store(0)
	defer x.pubWaiting.Store(0)
	defer x.pubSnoozed.Store(0)
	defer x.pubBreakers.Store(0)
	defer x.pubHalted.Store(0)
	reading := time.NewTicker(prefetchEvery)
	defer reading.Stop()
	x.lastReading = time.Now()
	x.applyControl(x.cfg.InitialControl)
	x.topUp()

	events := x.m.Events()
	stopping := ctx.Done()
	var quiet <-chan struct{}
	var deadline <-chan time.Time
	var shutdown *time.Timer
	defer func() {
		if shutdown != nil {
			shutdown.Stop()
		}
	}()
	// take handles what Events gave: an event, or its end (the member
	// stopped, after Leave or on its own).
	take := func(ev member.Event, ok bool) {
		if ok {
			x.event(ev)
			return
		}
		events = nil
		if x.phase != phaseLeft {
			x.memberFailed()
		}
	}
	for events != nil {
		select {
		case ev, ok := <-events:
			take(ev, ok)
		case r := <-x.done:
			x.result(r)
			for more := true; more; {
				select {
				case r := <-x.done:
					x.result(r)
				default:
					more = false
				}
			}
		case <-x.wake.C:
			x.armed = false
			x.wakeUp()
		case <-reading.C:
			x.reading()
		case <-x.copySignal:
			x.takeCopies()
		case st := <-x.cfg.Controls:
			x.applyControl(st)
		case <-x.cfg.Rate.wake(): // a token for a job waiting on the rate limit
		case <-stopping: // 1.
			stopping = nil
			x.beginStop()
			quiet = x.m.Quiet()
			shutdown = time.NewTimer(x.cfg.ShutdownTimeout)
			deadline = shutdown.C
		case <-quiet: // 2.
			quiet = nil
			// Every record fetched was sent on Events before Quiet
			// closed: take them before releasing anything.
			for more := true; more && events != nil; {
				select {
				case ev, ok := <-events:
					take(ev, ok)
				default:
					more = false
				}
			}
			x.releaseHeld()
		case <-deadline: // 3.
			deadline = nil
			x.expire()
		}
		x.startQueued()
		x.shed(time.Now())
		x.topUp()
		x.leaveWhenDone() // 4.
	}
	x.finishStop() // 5.
}

// event applies one report of the member: lost locks first, as the member
// does, then deliveries, renewals and acknowledgement results.
func (x *executor) event(ev member.Event) {
	for _, k := range ev.Lost {
		if j := x.jobs[k]; j != nil {
			x.drop(j, ErrLockLost)
		}
	}
	for _, d := range ev.Deliveries {
		x.deliver(d)
	}
	if len(ev.Renewals) > 0 {
		now := time.Now()
		for _, r := range ev.Renewals {
			x.renewed(r, now)
		}
	}
	for _, a := range ev.Acked {
		if a.Err != nil {
			x.ackFailed(a)
		}
	}
}

// deliver takes a delivered record: a new job, queued for a slot, or a
// new delivery of a record whose job the executor already has.
func (x *executor) deliver(d member.Delivery) {
	// Below 0 when the member delivered past the credit (a whole producer
	// batch, batch_optimized): a debt the member keeps too, so both agree
	// on what is granted, and topUp grants nothing until it is repaid.
	x.outstanding--
	if d.Lock > x.lockSeen {
		x.lockSeen = d.Lock
	}
	k := d.Key()
	if j := x.jobs[k]; j != nil {
		// Its lock ran out and the member fetched it again; acks are by
		// offset, so the job in hand answers for this delivery too. Its
		// credit comes back through topUp.
		j.deadline, j.lock = d.Deadline, d.Lock
		if d.Count > j.count {
			j.count = d.Count
		}
		switch {
		case j.state == jobQueued: // nobody has seen the job yet
			j.job.DeliveryCount, j.job.LockDeadline = j.count, d.Deadline
			if j.tracked {
				x.tracker.Relock(k, d.Deadline, d.Lock)
				x.armFor(k)
			}
		case j.state == jobRunning, j.state == jobHeld, j.state == jobPaused,
			j.state == jobWaiting, j.state == jobSnoozed, j.state == jobCopying, j.state == jobHalted:
			x.tracker.Relock(k, d.Deadline, d.Lock)
			x.armFor(k)
		}
		return
	}
	j := &xjob{key: k, state: jobQueued, count: d.Count, deadline: d.Deadline, lock: d.Lock}
	fillJob(&j.job, d, x.cfg.Group, x.cfg.DeliveryLimit())
	if x.gone() {
		x.log.Warn("a record arrived after the shutdown deadline; releasing it", "record", k)
		if x.phase != phaseLeft {
			x.m.Ack(k, member.Release)
		}
		x.report(j, AckRelease, OutcomeInterrupted, ErrShutdown, 0, nil)
		return
	}
	x.jobs[k] = j
	j.ks = x.keyOf(j)
	if nb := j.job.NotBefore(); !nb.IsZero() && time.Until(nb) > 0 {
		// A snoozed job's copy, early: held until it is due.
		x.track(j, time.Now())
		x.holdSnoozed(j, nb)
		return
	}
	if x.topicPaused(k.Topic) {
		x.queued++ // as queued, and at once waiting for the pause
		x.halt(j, time.Now())
		return
	}
	if x.lanes != nil {
		x.lanes.push(j)
	} else {
		x.queue.push(j)
	}
	x.queued++
	if x.pause != nil {
		x.pause.waited++
		x.track(j, time.Now())
	}
}

// startQueued starts queued jobs, in order, while there are free slots:
// first the jobs held through a pause that just ended; while paused, only
// the probe.
func (x *executor) startQueued() {
	if x.pause != nil {
		x.maybeProbe()
		return
	}
	x.startReruns()
	x.startReady()
	for x.running < x.conc && x.queued > 0 && x.cfg.Rate.take(time.Now()) {
		x.start(x.popQueued())
	}
}

// popQueued takes the next queued job off the queue: the oldest, or with
// priorities the one they choose (priority.go); x.queued must be
// positive.
func (x *executor) popQueued() *xjob {
	if x.lanes != nil {
		return x.lanes.pop()
	}
	return x.queue.pop()
}

// eachQueued calls f for every job in the queue, dropped ones included.
func (x *executor) eachQueued(f func(*xjob)) {
	if x.lanes != nil {
		x.lanes.each(f)
		return
	}
	for _, j := range x.queue.all() {
		f(j)
	}
}

// requeueFront puts js, oldest first, back at the head of the queue (of
// their topics' lanes with priorities), ahead of the jobs queued now.
func (x *executor) requeueFront(js []*xjob) {
	if len(js) == 0 {
		return
	}
	if x.lanes != nil {
		x.lanes.pushFront(js)
		return
	}
	x.queue.pushFront(js)
}

// resetQueue empties the queue.
func (x *executor) resetQueue() {
	x.queue.reset()
	if x.lanes != nil {
		x.lanes.reset()
	}
}

// start runs j's handler, unless its lock is about to run out or its
// topic is paused (then it waits for the pause).
func (x *executor) start(j *xjob) {
	now := time.Now()
	if x.topicPaused(j.key.Topic) {
		x.halt(j, now)
		return
	}
	// The member's deadline is its fetch's send time plus the lock, so it
	// is never late; still, do not start a job whose lock is about to run
	// out. On its last delivery it runs all the same: a release would
	// make the broker archive it unhandled, while a run renews the lock at
	// once (its renewal is due at once) and a dlq middleware parks it if
	// it fails.
	last := j.last()
	if renew.Expired(now, j.deadline, min(startMargin, j.lock/4)) && !last {
		x.log.Warn("lock expired before the job started; releasing it", "record", j.key)
		x.finish(j, AckRelease, OutcomeInterrupted, ErrLockExpired, 0)
		return
	}
	if x.cfg.Handlers[j.key.Topic] == nil { // cannot happen: the member fetches registered topics only
		x.finish(j, AckRelease, OutcomeInterrupted, fmt.Errorf("worker: no handler for topic %q", j.key.Topic), 0)
		return
	}
	if !x.admit(j, now, false) {
		return // waits for its key
	}
	x.queued--
	x.begin(j, now)
}

// begin runs the handler of j, a job that has not run yet, admitted by its
// key's limits.
func (x *executor) begin(j *xjob, now time.Time) {
	j.ctx, j.cancel = context.WithCancelCause(x.baseFor(j))
	j.h, j.timeout = x.cfg.Handlers[j.key.Topic], x.cfg.Timeouts[j.key.Topic]
	j.state, j.ran, j.start = jobRunning, true, now
	if !j.tracked {
		x.tracker.Add(j.key, now, j.deadline, j.lock)
	}
	if x.obs != nil {
		x.obs.JobStarted(&j.job)
	}
	x.launch(j)
}

// launch hands j, set up to run, to a handler goroutine.
func (x *executor) launch(j *xjob) {
	x.armFor(j.key)
	x.running++
	if x.spawned < x.running {
		x.spawned++
		x.wg.Add(1)
		go x.handle()
	}
	x.work <- j // never blocks: at most conc jobs run, and work holds conc
}

// handle is a handler goroutine: it runs jobs until work closes.
func (x *executor) handle() {
	defer x.wg.Done()
	for j := range x.work {
		start := time.Now()
		r := xresult{j: j, err: runJob(j)}
		r.took = time.Since(start)
		if r.err != nil {
			// The outcomes middleware decides: parked, or cancelled
			// before it ran. Both are done with (ACCEPT). A snooze is
			// the handler's word that it is not time yet.
			if p, ok := handler.ParkedOf(r.err); ok {
				r.err, r.parked = nil, &p
			} else if handler.IsCancelled(r.err) {
				r.err, r.cancelled = nil, true
			} else if d, ok := handler.SnoozeOf(r.err); ok && !handler.IsPermanent(r.err) {
				r.err, r.snooze = nil, d
			}
		}
		x.done <- r
	}
}

// result takes a handler's outcome.
func (x *executor) result(r xresult) {
	x.running--
	x.completed++
	j := r.j
	if j.state != jobRunning || x.jobs[j.key] != j {
		return // abandoned earlier; its record was released
	}
	now := time.Now()
	keyDown := x.keyResult(j, r.err, r.took, now)
	x.keyStopped(j, now)
	var ue *handler.UnavailableError
	unavailable := r.err != nil && errors.As(r.err, &ue) && !handler.IsPermanent(r.err)
	probe := x.pause != nil && x.pause.probe == j
	if probe {
		x.pause.probe = nil
		if !unavailable {
			x.resume() // the dependency is back; j's outcome is decided below
		}
	}
	if (r.err == nil || handler.IsPermanent(r.err)) && !j.deadline.After(time.Now()) {
		// The lock ran out before the handler returned, with no renewal
		// answered: the process was frozen (a SIGSTOP, a long GC or VM
		// pause) or its member cut off. The broker has made the record
		// available again, perhaps to another member, so the job is not
		// done as far as the queue goes, and is not reported so: the
		// acknowledgement still goes (refused if the record is gone, and
		// right if a renewal in flight did reach the broker), and the job
		// ends interrupted by ErrLockLost (a parked job keeps its Parked);
		// its next delivery finds its claim, if it made one. The outcome
		// is decided here, not on the broker's answer to that ack: Kafka
		// answers an ack of an offset below the share-partition start
		// offset with no error and ignores it (docs/architecture.md, fact 4), which
		// is what a record another member has taken and accepted
		// meanwhile becomes (TestFrozenWorkerWakesWithoutClaimingLostJobs
		// on Kafka 4.4.0: the woken worker's ACCEPT of such a record is
		// answered OK).
		ack, t := AckAccept, member.Accept
		if r.err != nil {
			ack, t = AckReject, member.Reject
		}
		x.m.Ack(j.key, t)
		x.end(j, ErrLockLost)
		x.report(j, ack, OutcomeInterrupted, fmt.Errorf("%w: it ran out %v before the handler returned", ErrLockLost, time.Since(j.deadline).Round(time.Millisecond)), r.took, r.parked)
		return
	}
	switch {
	case r.err == nil && r.snooze > 0:
		x.snooze(j, r, now)
		return
	case r.err == nil && r.parked != nil:
		x.m.Ack(j.key, member.Accept)
		x.end(j, nil)
		x.report(j, AckAccept, OutcomeParked, r.parked.Err, r.took, r.parked)
		return
	case r.err == nil && r.cancelled:
		x.finish(j, AckAccept, OutcomeCancelled, nil, r.took)
		return
	case r.err == nil:
		x.finish(j, AckAccept, OutcomeSucceeded, nil, r.took)
		return
	case handler.IsPermanent(r.err):
		x.finish(j, AckReject, OutcomeDiscarded, r.err, r.took)
		return
	}
	if keyDown {
		// Its key's destination is down: the job waits for the breaker,
		// on this delivery, first in its key's line; while stopping it
		// is copied for later.
		j.err, j.took = r.err, r.took
		j.cancel(nil)
		if x.stopping() {
			x.copyOut(j, now)
			return
		}
		x.waitForKey(j, now, true)
		return
	}
	if unavailable && !x.stopping() {
		// Not the job's failure: hold it, on this delivery, until the
		// dependency is back. While stopping it is released like a
		// retry (below).
		x.pauseJob(j, r, ue, probe)
		return
	}
	// While stopping there is no backoff, but no release either until
	// the member is quiet (releaseHeld) or the shutdown deadline passes
	// (expire).
	untilQuiet := x.holdsUntilQuiet()
	var d time.Duration
	if !x.stopping() {
		d = x.backoff(j, r.err)
	}
	if d <= 0 && !untilQuiet {
		x.finish(j, AckRelease, OutcomeRetried, r.err, r.took)
		return
	}
	// Hold the record, its lock renewed as needed, so the next delivery
	// does not come at once: a failing dependency would otherwise use up
	// the delivery limit in moments.
	j.state, j.err, j.took = jobHeld, r.err, r.took
	j.cancel(nil)
	if !untilQuiet {
		j.releaseAt = time.Now().Add(d)
		heap.Push(&x.holds, j)
		x.arm(j.releaseAt)
	}
}

// backoff returns how long to hold a job that failed with err, a
// retryable error, before releasing it: the delay the handler asked for
// (handler.RetryAfter), else the worker's RetryBackoff; none on its last
// delivery (the broker archives it either way) and never past MaxHold − 1 s
// from its start.
func (x *executor) backoff(j *xjob, err error) time.Duration {
	if j.last() {
		return 0
	}
	var d time.Duration
	var re *handler.RetryError
	switch f := x.cfg.RetryBackoff; {
	case errors.As(err, &re) && re.After > 0:
		d = re.After
	case f != nil:
		d = f(j.count) // the newest delivery's count
	}
	if limit := time.Until(j.start.Add(x.cfg.MaxHold)) - time.Second; d > limit {
		d = limit
	}
	return d
}

// wakeUp renews the locks that are due, ends jobs over MaxHold and
// releases held jobs whose backoff is over. It scans the tracker (every
// running and held job) only when the tracker has something due, not at
// the end of each retry hold.
func (x *executor) wakeUp() {
	now := time.Now()
	x.keysDue(now)
	if x.trackerSet && !now.Before(x.trackerAt) {
		x.trackerSet = false
		due, over := x.tracker.Due(now)
		for _, k := range over {
			j := x.jobs[k]
			if j == nil {
				continue
			}
			switch j.state {
			case jobHeld, jobPaused:
				x.finish(j, AckRelease, OutcomeRetried, j.err, j.took)
				continue
			case jobQueued: // waited for a slot or a pause that long
				x.finish(j, AckRelease, OutcomeInterrupted, ErrMaxHold, 0)
				continue
			case jobWaiting, jobHalted: // waited for its key or its topic's pause that long: for later
				x.copyOut(j, now)
				continue
			case jobSnoozed: // not due yet: for later
				x.copyOut(j, j.releaseAt)
				continue
			case jobCopying:
				// Its copy is being written (a slow Snoozer or produce):
				// the lock is kept one more MaxHold for it, so that the
				// job is acknowledged as snoozed, not released at a
				// delivery's cost. A copy slower than that gives up.
				if !j.reheld {
					j.reheld = true
					x.tracker.Rehold(k, now)
					continue
				}
				x.finish(j, AckRelease, OutcomeInterrupted, ErrMaxHold, j.took)
				continue
			}
			x.abandon(j, ErrMaxHold)
		}
		if len(due) > 0 {
			x.m.Renew(due...)
		}
		if at, ok := x.tracker.Next(); ok {
			x.trackerAt, x.trackerSet = at, true
		}
	}
	if !x.holdsUntilQuiet() {
		for len(x.holds) > 0 && !x.holds[0].releaseAt.After(now) {
			j := heap.Pop(&x.holds).(*xjob)
			switch {
			case x.jobs[j.key] != j:
			case j.state == jobHeld:
				x.finish(j, AckRelease, OutcomeRetried, j.err, j.took)
			case j.state == jobSnoozed:
				x.unsnooze(j, now)
			}
		}
	}
	x.wakeAt, x.armed = time.Time{}, false
	if x.trackerSet {
		x.arm(x.trackerAt)
	}
	if len(x.keyTimes) > 0 {
		x.arm(x.keyTimes[0].at)
	}
	for len(x.holds) > 0 {
		if j := x.holds[0]; (j.state == jobHeld || j.state == jobSnoozed) && x.jobs[j.key] == j {
			if !x.holdsUntilQuiet() {
				x.arm(j.releaseAt)
			}
			break
		}
		heap.Pop(&x.holds)
	}
	// A probe that is due waits for a slot or a record, not for time.
	if p := x.pause; p != nil && p.probe == nil && !x.stopping() && p.probeAt.After(now) {
		x.arm(p.probeAt)
	}
}

// renewed takes the outcome of one renewal.
func (x *executor) renewed(r member.Renewal, now time.Time) {
	j := x.jobs[r.Key]
	if j == nil || j.state == jobGone || (j.state == jobQueued && !j.tracked) {
		return // finished meanwhile
	}
	if x.obs != nil {
		x.obs.LockRenewed(&j.job, r.Err)
	}
	if r.Err == nil {
		x.tracker.RenewedUntil(r.Key, r.Deadline)
		if r.Deadline.After(j.deadline) {
			j.deadline = r.Deadline
		}
		x.armFor(r.Key)
		return
	}
	x.log.Warn("lock renewal failed", "record", r.Key, "error", r.Err)
	if !j.deadline.After(now) {
		if j.state != jobRunning {
			x.finish(j, AckRelease, OutcomeInterrupted, ErrLockLost, j.took)
			return
		}
		x.abandon(j, ErrLockLost)
		return
	}
	x.tracker.RenewFailed(r.Key, now.Add(renewRetry))
	x.armFor(r.Key)
}

// abandon releases a job whose handler is still running and cancels its
// context with cause; whatever the handler returns later is discarded.
func (x *executor) abandon(j *xjob, cause error) {
	x.log.Warn("releasing a running job", "reason", cause, "record", j.key,
		"running_for", time.Since(j.start).Round(time.Millisecond), "lock_left", time.Until(j.deadline).Round(time.Millisecond))
	x.finish(j, AckRelease, OutcomeInterrupted, cause, time.Since(j.start))
}

// finish sends j's terminal acknowledgement and reports it.
func (x *executor) finish(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration) {
	switch ack {
	case AckAccept:
		x.m.Ack(j.key, member.Accept)
	case AckReject:
		x.m.Ack(j.key, member.Reject)
	default:
		x.m.Ack(j.key, member.Release)
	}
	x.end(j, err)
	x.report(j, ack, outcome, err, took, nil)
}

// drop ends j without an acknowledgement: its lock is gone (cause
// ErrLockLost) or the member stopped (ErrShutdown).
func (x *executor) drop(j *xjob, cause error) {
	var took time.Duration
	outcome := OutcomeInterrupted
	switch j.state {
	case jobRunning:
		took = time.Since(j.start)
	case jobHeld, jobPaused:
		took, outcome = j.took, OutcomeRetried
	case jobWaiting, jobSnoozed, jobCopying, jobHalted:
		took = j.took
	}
	x.end(j, cause)
	x.report(j, AckRelease, outcome, cause, took, nil)
}

// end takes j out of the executor and cancels its handler's context.
func (x *executor) end(j *xjob, cause error) {
	if j.state != jobQueued || j.tracked {
		x.tracker.Remove(j.key)
	}
	x.leaveState(j)
	if p := x.pause; p != nil && p.probe == j {
		p.probe = nil
	}
	if j.cancel != nil {
		j.cancel(cause)
	}
	j.state = jobGone
	delete(x.jobs, j.key)
	if ks := j.ks; ks != nil {
		if ks.probe == j {
			ks.probe = nil
		}
		now := time.Now()
		if j.keyRunning {
			x.keyStopped(j, now)
		} else {
			x.keyFreed(ks, now)
		}
	}
}

// leaveState takes j out of the count of its state.
func (x *executor) leaveState(j *xjob) {
	switch j.state {
	case jobQueued:
		x.queued--
	case jobWaiting:
		x.waiting--
	case jobSnoozed:
		x.snoozed--
	case jobHalted:
		x.halted--
	}
}

// report counts and logs how j ended and tells the observer. A release on
// the last delivery is discarded whatever the cause: the broker archives
// the record.
func (x *executor) report(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration, parked *handler.DeadLetter) {
	final := ack != AckRelease || j.last()
	if ack == AckRelease && final {
		outcome = OutcomeDiscarded
	}
	x.outcomes[outcome]++
	x.logOutcome(j, ack, outcome, err, took, parked)
	if x.obs == nil {
		return
	}
	x.obs.JobFinished(&j.job, Result{Outcome: outcome, Ack: ack, Err: err, Parked: parked, Ran: j.ran, Duration: took, LockLeft: time.Until(j.deadline), Final: final})
}

// logOutcome logs one line per finished delivery: Debug for a success or
// a retry, Warn for a parked job, Error for a discarded one (it will not
// run again and is in no dead-letter topic). Interrupted jobs were logged
// at Warn where the worker gave them up; their line here is Debug. A
// cancelled job's line is Info: someone stopped it, and it did not run.
func (x *executor) logOutcome(j *xjob, ack Ack, outcome Outcome, err error, took time.Duration, parked *handler.DeadLetter) {
	level, msg := slog.LevelDebug, "job finished"
	switch outcome {
	case OutcomeParked:
		level, msg = slog.LevelWarn, "job parked in its dead-letter topic"
	case OutcomeDiscarded:
		level, msg = slog.LevelError, "job discarded: it will not run again and was not parked (the dlq middleware parks such jobs)"
	case OutcomeRetried:
		msg = "job failed; released for a retry"
	case OutcomeInterrupted:
		msg = "job interrupted; released"
	case OutcomeCancelled:
		level, msg = slog.LevelInfo, "job cancelled; accepted without running"
	case OutcomeSnoozed:
		msg = "job snoozed; copied to run later and accepted"
	}
	ctx := context.Background()
	if !x.log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("outcome", outcome.String()),
		slog.String("ack", ack.String()),
		slog.String("topic", j.key.Topic),
		slog.Int("partition", int(j.key.Partition)),
		slog.Int64("offset", j.key.Offset),
		slog.String("job_id", j.job.ID()),
		slog.Int("delivery", int(j.count)),
		slog.Duration("took", took),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	if parked != nil {
		attrs = append(attrs, slog.String("reason", parked.Reason), slog.String("dlq_topic", parked.Topic),
			slog.Int("dlq_partition", int(parked.Partition)), slog.Int64("dlq_offset", parked.Offset))
	} else if r := handler.ReasonOf(err); r != "" {
		attrs = append(attrs, slog.String("reason", r))
	}
	x.log.LogAttrs(ctx, level, msg, attrs...)
}

// ackFailed reports an acknowledgement the broker did not apply.
func (x *executor) ackFailed(a member.AckResult) {
	if x.obs != nil {
		x.obs.AckFailed(a.Key.Topic, a.Key.Partition, a.Err)
	}
	x.ackWarnLeft++
	x.ackWarnLast = a.Err
	x.warnAcks(false)
}

// warnAcks logs the failed acknowledgements not logged yet, at most once
// per ackWarnEvery unless final.
func (x *executor) warnAcks(final bool) {
	if x.ackWarnLeft == 0 {
		return
	}
	now := time.Now()
	if !final && now.Sub(x.ackWarnAt) < ackWarnEvery {
		return
	}
	x.log.Warn("broker rejected acknowledgements", "records", x.ackWarnLeft, "error", x.ackWarnLast)
	x.ackWarnAt, x.ackWarnLeft, x.ackWarnLast = now, 0, nil
}

// arm makes the wake timer fire at at, unless it fires earlier already.
func (x *executor) arm(at time.Time) {
	if x.armed && !at.Before(x.wakeAt) {
		return
	}
	x.wakeAt, x.armed = at, true
	x.wake.Reset(time.Until(at))
}

// armFor arms the wake timer for k's next renewal or MaxHold.
func (x *executor) armFor(k member.Key) {
	if at, ok := x.tracker.When(k); ok {
		if !x.trackerSet || at.Before(x.trackerAt) {
			x.trackerAt, x.trackerSet = at, true
		}
		x.arm(at)
	}
}

// reading measures the job rate and recomputes the prefetch (prefetchFor),
// and has the locks of records that wait long for a slot renewed
// (keepQueuedLocks). While stopping there is no prefetch.
func (x *executor) reading() {
	now := time.Now()
	x.keepQueuedLocks(now)
	x.summarizeBreakers(now, false)
	dt := now.Sub(x.lastReading).Seconds()
	x.lastReading = now
	if dt <= 0 {
		return
	}
	r := float64(x.completed) / dt
	x.completed = 0
	if x.rate == 0 {
		x.rate = r
	} else if x.rate += rateWeight * (r - x.rate); x.rate < 0.01 {
		x.rate = 0 // idle: known no longer
	}
	if !x.stopping() {
		st := x.m.Stats()
		x.prefetch = prefetchFor(x.rate, st.FetchRTT, x.lockSeen)
		x.partitions = st.Partitions
	}
	x.pubRunning.Store(int64(x.running))
	x.pubQueued.Store(int64(x.queued))
	x.pubWaiting.Store(int64(x.waiting))
	x.pubSnoozed.Store(int64(x.snoozed))
	x.pubBreakers.Store(int64(x.breakersOpen))
	x.pubHalted.Store(int64(x.halted))
}

// keepQueuedLocks has the tracker renew the lock of every queued record
// that will need a renewal before the next reading: one that has waited
// for a slot about half its lock. The prefetch keeps a record's wait under
// a quarter of its lock at the job rate it saw, but when jobs suddenly
// take longer (a destination that slows down) the records in hand wait
// for the slow ones ahead of them; a lock that ran out would have the
// broker hand the record out again with a delivery spent and no run.
// Records that start sooner, nearly all of them, are never tracked while
// they wait, so this costs a pass over the queue per reading and nothing
// per job.
func (x *executor) keepQueuedLocks(now time.Time) {
	x.eachQueued(func(j *xjob) {
		if j.state != jobQueued || j.tracked {
			return
		}
		lock := j.lock
		if lock <= 0 {
			lock = x.lockSeen
		}
		if j.deadline.Sub(now) <= lock/2+2*prefetchEvery {
			x.track(j, now)
		}
	})
}

// counts returns the handlers running and the records waiting for a slot,
// as of the last prefetch reading (every prefetchEvery, until the stop);
// safe for concurrent use.
func (x *executor) counts() (running, queued int) {
	return int(x.pubRunning.Load()), int(x.pubQueued.Load())
}

// prefetchFor is the prefetch, in records beyond Concurrency, for a job
// rate (per second), a fetch round trip and a lock duration: the jobs of
// fetchesAhead round trips (at least prefetchHorizon) at that rate
// (Little's law), so short jobs get many records in hand and long jobs
// few; never so many that a queued record would wait more than a quarter
// of its lock for a handler (the jobs ahead of it take about prefetch ÷
// rate); and at most prefetchMax. No rate or round trip yet: none.
func prefetchFor(rate float64, rtt, lock time.Duration) int {
	if rate <= 0 || rtt <= 0 || lock <= 0 {
		return 0
	}
	horizon := max(fetchesAhead*rtt, prefetchHorizon)
	n := math.Ceil(rate * horizon.Seconds())
	n = min(n, math.Floor(rate*lock.Seconds()/4), prefetchMax)
	return max(int(n), 0)
}

// topUp grants credit up to Concurrency + prefetch records in hand or on
// the way. A job that finishes while the target shrank gives back no
// credit.
func (x *executor) topUp() {
	if x.stopping() || x.pause != nil {
		return
	}
	// Jobs waiting for their keys will need the rate's tokens too.
	n := x.conc + x.prefetch - x.running - x.queued - len(x.reruns) - x.waitingOver() - x.outstanding
	if n = x.cfg.Rate.room(time.Now(), n, x.queued+x.waiting+x.outstanding); n > 0 {
		x.outstanding += n
		x.m.Grant(n)
	}
}

// fillJob fills j from a member delivery.
func fillJob(j *handler.Job, d member.Delivery, group string, limit int32) {
	rec := d.Record
	*j = handler.Job{
		Topic:         rec.Topic,
		Partition:     rec.Partition,
		Offset:        rec.Offset,
		Key:           rec.Key,
		Value:         rec.Value,
		Timestamp:     rec.Timestamp,
		Group:         group,
		DeliveryCount: d.Count,
		DeliveryLimit: limit,
		LockDeadline:  d.Deadline,
	}
	if len(rec.Headers) > 0 {
		j.Headers = make([]handler.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			j.Headers[i] = handler.Header{Key: h.Key, Value: h.Value}
		}
	}
}

// holdHeap orders held jobs by releaseAt (container/heap).
type holdHeap []*xjob

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, k int) bool { return h[i].releaseAt.Before(h[k].releaseAt) }
func (h holdHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *holdHeap) Push(v any)        { *h = append(*h, v.(*xjob)) }
func (h *holdHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return j
}

var _ groupMember = (*member.Member)(nil)

// startMargin is the least time left on a record's lock for its job to be
// started (or a quarter of the lock, if less).
const startMargin = 500 * time.Millisecond

// doneWith reports whether err is middleware's word that the job is done
// with although it did not succeed: parked, or cancelled before it ran.
func doneWith(err error) bool {
	_, parked := handler.ParkedOf(err)
	return parked || handler.IsCancelled(err)
}

// runJob runs j's handler within its job timeout, if it has one: at the
// timeout its context is cancelled with cause ErrJobTimeout, and an error
// the handler returns then (unless permanent) becomes a retry with reason
// "timeout" that wraps ErrJobTimeout and the handler's error. A panic that
// escaped every middleware (one in a middleware outside the handler's own
// recovery) becomes a permanent failure that keeps the panic's stack.
func runJob(j *xjob) error {
	if j.timeout <= 0 {
		return safehandle.Handle(j.ctx, j.h, &j.job)
	}
	ctx, cancel := context.WithTimeoutCause(j.ctx, j.timeout, ErrJobTimeout)
	defer cancel()
	err := safehandle.Handle(ctx, j.h, &j.job)
	if err != nil && errors.Is(context.Cause(ctx), ErrJobTimeout) && !handler.IsPermanent(err) && !doneWith(err) {
		err = &handler.RetryError{Reason: handler.ReasonTimeout, Err: fmt.Errorf("%w after %v: %w", ErrJobTimeout, j.timeout, err)}
	}
	return err
}
