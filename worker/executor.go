package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/member"
	"github.com/shareq/shareq/renew"
)

// groupMember is the share-group member as the executor uses it: *member.Member,
// or a fake in tests.
type groupMember interface {
	Events() <-chan member.Event                       // deliveries, renewal results, ack results, lost locks; closed when the member stops
	Grant(n int)                                       // n more records may be fetched (credits; each delivered record uses one)
	Ack(k member.Key, t member.AckType)                // terminal ack; never blocks; result in a later Event.Acked
	Renew(keys ...member.Key)                          // never blocks; one Renewal per key in a later Event
	StopFetching()                                     // no more fetches
	PauseTopics(topics []string)                       // fetch nothing of these topics until a later call leaves them out
	Quiet() <-chan struct{}                            // closed once, after StopFetching, when no fetch is in flight and all fetched records were sent on Events
	Leave()                                            // final acks + release of everything still held, leave the group; Events closes after
	Stats() member.Stats                               // FetchRTT etc.
	Standing() (lastHeartbeat time.Time, fences int64) // when the coordinator last answered a heartbeat; how often it fenced the member
}

// jobState is where a job is in the executor. A job in any state but
// jobGone is its key's entry in the executor's map (executor.jobs):
// deliver puts a job there only for a key it does not hold, and end alone
// deletes it and sets jobGone.
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
	job    handler.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	run    *topicHandler // its topic's handler and job timeout, set when it starts

	state    jobState
	count    int32         // the newest delivery count (a redelivery raises it)
	deadline time.Time     // the lock deadline as far as the executor knows
	lock     time.Duration // the lock duration of the newest delivery
	start    time.Time     // when its handler first started on this delivery (MaxHold counts from it)
	fences   int64         // the member's fencings when the handler started (Standing)
	ran      bool
	// tracked: taken by the tracker before it ran (queued through a
	// pause, waiting or snoozed), MaxHold counting from heldSince; a
	// start keeps that entry.
	tracked bool
	reheld  bool // given one more MaxHold for its copy (wakeUp)

	ks         *keyState // its key under the topic's KeyLimit; nil: none
	keyRunning bool      // counted in ks.running
	// young: in x.young at youngIdx, not yet in the tracker (trackLater).
	young    bool
	youngIdx int32

	// held is what a job held back carries; nil until it is first held
	// (most jobs never are, and each field here is bytes per job).
	held *xheld
}

// xheld is what a job held back carries: when the tracker took it, and a
// held or paused job's outcome and when it is released with it.
type xheld struct {
	heldSince time.Time // when the tracker took it (tracked), MaxHold counting from then
	releaseAt time.Time // a held or snoozed job is released then
	err       error     // a held or paused job's handler's outcome
	took      time.Duration
}

// hold returns j's held fields, made when first asked for.
func (j *xjob) hold() *xheld {
	if j.held == nil {
		j.held = new(xheld)
	}
	return j.held
}

// setOutcome keeps the handler's outcome of a job held back.
func (j *xjob) setOutcome(err error, took time.Duration) {
	if j.held == nil && err == nil && took == 0 {
		return
	}
	h := j.hold()
	h.err, h.took = err, took
}

// outcome returns the handler's outcome kept by setOutcome (nil, 0: none).
func (j *xjob) outcome() (error, time.Duration) {
	if j.held == nil {
		return nil, 0
	}
	return j.held.err, j.held.took
}

// heldErr returns the handler's error kept by setOutcome (nil: none).
func (j *xjob) heldErr() error {
	err, _ := j.outcome()
	return err
}

// took returns how long the handler ran, as kept by setOutcome.
func (j *xjob) took() time.Duration {
	_, took := j.outcome()
	return took
}

// releaseAt returns when a held or snoozed job is released.
func (j *xjob) releaseAt() time.Time {
	if j.held == nil {
		return time.Time{}
	}
	return j.held.releaseAt
}

// key returns the job's record key.
func (j *xjob) key() member.Key {
	return member.Key{Topic: j.job.Topic, Partition: j.job.Partition, Offset: j.job.Offset}
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
// of its state but the fields marked otherwise (each field says who owns
// it); handlers run on goroutines it starts and waits for, and hand their
// outcomes back through done. Its code is split by concern: the loop
// (executor_loop.go), the stop (executor_stop.go), outcomes and
// acknowledgements (executor_outcomes.go), renewals and holds
// (executor_renew.go), and credit and prefetch (executor_prefetch.go).
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
	// Set by newExecutor and not written after: read by any goroutine.
	cfg  executorConfig
	m    groupMember // the share-group member whose deliveries it runs
	log  *slog.Logger
	obs  Observer
	conc int

	// Between the goroutines, made by newExecutor.
	hand       *handoff      // jobs from run to the handler goroutines, results back
	copySignal chan struct{} // copiers send (copied); run receives

	// Shared, each as its comment says.
	copyMu   sync.Mutex
	copyDone []copyResult   // guarded by copyMu: copiers append the copies written (or failed), run takes them (takeCopies)
	copiers  conc.WaitGroup // run starts the copies (copyOut) and waits for them (finishStop)
	wg       sync.WaitGroup // run adds the handler goroutines and waits for them (waitHandlers); each calls Done
	// outcomes counts finished deliveries by outcome, for the worker's
	// stop line: run writes it; the worker reads it after run returned.
	outcomes [outcomeEnd]int64 // by Outcome
	// running and queued as of the last reading, for MemberStats: run
	// writes them; any goroutine reads them (counts, MemberStats).
	pubRunning, pubQueued               atomic.Int64
	pubWaiting, pubSnoozed, pubBreakers atomic.Int64
	pubHalted                           atomic.Int64

	// Everything below is owned by the run goroutine (run and all it
	// calls): no other goroutine reads or writes it.

	jobs    member.KeyMap[*xjob] // queued, running and held jobs
	queue   fifo                 // queued jobs without priorities (lanes nil); dropped ones are skipped
	lanes   *topicQueues         // queued jobs by topic, with priorities (priority.go); nil: none
	queued  int                  // queued jobs (entries of queue still queued)
	running int                  // handlers running, abandoned ones included: each holds a slot
	spawned int                  // handler goroutines started
	// handlers are the topics' handlers as jobs start them, and
	// lastHandler the one of the last job started (handlerFor).
	handlers    map[string]*topicHandler
	lastHandler *topicHandler
	base        context.Context // run's context without its cancellation
	tracker     *renew.Tracker[*xjob]
	holds       holdHeap // held jobs by releaseAt; dropped ones are skipped

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
	// snoozerWarnAt is when warnSnoozer last logged.
	snoozerWarnAt time.Time

	// Credits (executor_prefetch.go): outstanding were granted and not
	// yet used by a delivery; below 0, a debt: the member delivered that
	// many past the credit (member.Delivery, batch_optimized fetches).
	// The executor keeps running + queued + outstanding at conc +
	// prefetch, and grants nothing while stopping.
	outstanding int
	prefetch    int
	// chunk and reserve: with chunk above 0, credit is granted a chunk
	// or more at a time, once the last grant was used up (all but slack
	// of it) and, for a chunk alone, fewer than reserve records are
	// queued, so that fetches take whole producer batches (prefetchFor,
	// topUp). slack is what of a chunk the sessions with nothing left to
	// fetch may hold (reading).
	chunk, reserve int
	slack          int
	completed      int     // handler returns, and queued jobs that went to wait for their keys, since the last prefetch reading
	rate           float64 // moving average of handler returns per second
	lastReading    time.Time
	readings       *time.Ticker // run's: when to read the rate (reading)
	// The first readings (reading, beginReadings): how many are left,
	// when their first job started, and the jobs completed since.
	firstReadings int
	firstJob      time.Time
	firstDone     int
	lockSeen      time.Duration // the longest lock of any delivery

	// Renewals and holds (executor_renew.go).
	wake   *time.Timer // the next renewal, MaxHold or end of a retry hold
	wakeAt time.Time
	armed  bool
	// trackerAt is the earliest time the tracker may have something due
	// (trackerSet false: nothing); only then does a wake-up scan it.
	trackerAt  time.Time
	trackerSet bool
	// young are running jobs not yet in the tracker: most jobs end long
	// before their lock needs a renewal or MaxHold comes, and the
	// tracker's map cost a few per cent of the CPU of a short job. A pass
	// at youngAt (youngSet) moves those whose renewal or MaxHold comes
	// within two passes into the tracker (trackLater).
	young    []*xjob
	youngAt  time.Time
	youngSet bool

	// turn is the time of the loop's current turn (now), zero until it is
	// first asked for in a turn: one clock reading serves every decision
	// of a turn, where each used to read the clock (about eight readings
	// a job, 12 % of the executor's CPU on this machine's clock).
	turn time.Time

	// phase is the step of the stop sequence the executor is at
	// (executor_stop.go); only enter changes it.
	phase phase

	// Failed acknowledgements (executor_outcomes.go, warnAcks).
	ackWarnAt   time.Time
	ackWarnLeft int // failed acknowledgements not logged yet
	ackWarnLast error
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
	// SessionTimeout is the group's session timeout as the worker sets it
	// (SessionTimeout); 0: left alone, unknown.
	SessionTimeout time.Duration

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
		RenewMargin: cfg.renewMargin, MaxHold: cfg.maxHold, RetryBackoff: cfg.retryBackoff, SessionTimeout: cfg.sessionTimeout,
		Handlers: handlers, Timeouts: timeouts, Limits: cfg.keyLimitsByTopic(), Snoozer: cfg.snoozer,
		Logger: cfg.logger, Observer: cfg.observer, Queues: cfg.topicQueues(),
	}
}

func newExecutor(cfg executorConfig, m groupMember) *executor {
	conc := cfg.Concurrency
	return &executor{
		cfg:     cfg,
		m:       m,
		log:     cfg.Logger.With("group", cfg.Group),
		obs:     cfg.Observer,
		conc:    conc,
		tracker: renew.NewTracker[*xjob](renew.Policy{Margin: cfg.RenewMargin, MaxHold: cfg.MaxHold}),
		hand:    newHandoff(),
		limits:  cfg.Limits,
		lanes:   cfg.Queues,
		keys:    make(map[keyID]*keyState),

		topicPauses: make(map[string]TopicPause),
		// copySignal wakes the run loop for written copies (copied).
		copySignal: make(chan struct{}, 1),
	}
}

var _ groupMember = (*member.Member)(nil)
