package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/jobctx"
	"github.com/shareq/shareq/internal/member"
	"github.com/shareq/shareq/internal/safehandle"
	"github.com/shareq/shareq/renew"
)

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
	x.readings = time.NewTicker(prefetchEvery) // faster for a while when jobs start (firstReadings)
	defer x.readings.Stop()
	x.lastReading = x.now()
	x.applyControl(x.cfg.InitialControl)
	x.topUp()

	events := x.m.Events()
	// The signals of steps 1 to 3 of the stop, each nil while its step
	// cannot come yet and once it came.
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
		x.turn = time.Time{} // read again after the wait
		select {
		case ev, ok := <-events:
			take(ev, ok)
		case <-x.hand.ready:
			for _, r := range x.hand.take() {
				x.result(r)
			}
		case <-x.wake.C:
			x.armed = false
			x.wakeUp()
		case <-x.readings.C:
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
		x.shed(x.now())
		x.topUp()
		x.leaveWhenDone() // 4.
		x.hand.flush()    // the jobs started in this turn, to the handler goroutines
	}
	x.turn = time.Time{}
	x.finishStop() // 5.
}

// now is the time of the loop's current turn: the clock read once a turn,
// at the first decision that needs it. A turn takes microseconds to a few
// milliseconds (a fetch's deliveries), far below any lock, hold or rate
// slot it is compared with.
func (x *executor) now() time.Time {
	if x.turn.IsZero() {
		x.turn = time.Now()
	}
	return x.turn
}

// event applies one report of the member: lost locks first, as the member
// does, then deliveries, renewals and acknowledgement results.
func (x *executor) event(ev member.Event) {
	for _, k := range ev.Lost {
		if j := x.jobs.Get(k); j != nil {
			x.drop(j, ErrLockLost)
		}
	}
	for _, d := range ev.Deliveries {
		x.deliver(d)
	}
	if len(ev.Renewals) > 0 {
		now := x.now()
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
	if j := x.jobs.Get(k); j != nil {
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
				x.tracker.Relock(j, d.Deadline, d.Lock)
				x.armFor(j)
			}
		case j.state == jobRunning, j.state == jobHeld, j.state == jobPaused,
			j.state == jobWaiting, j.state == jobSnoozed, j.state == jobCopying, j.state == jobHalted:
			x.tracker.Relock(j, d.Deadline, d.Lock)
			x.armFor(j)
		}
		return
	}
	j := &xjob{state: jobQueued, count: d.Count, deadline: d.Deadline, lock: d.Lock}
	fillJob(&j.job, d, x.cfg.Group, x.cfg.DeliveryLimit())
	if x.gone() {
		x.log.Warn("a record arrived after the shutdown deadline; releasing it", "record", k)
		if x.phase != phaseLeft {
			x.m.Ack(k, member.Release)
		}
		x.report(j, AckRelease, OutcomeInterrupted, ErrShutdown, 0, nil)
		return
	}
	x.jobs.Put(k, j)
	j.ks = x.keyOf(j)
	if nb := j.job.NotBefore(); !nb.IsZero() && time.Until(nb) > 0 {
		// A snoozed job's copy, early: held until it is due.
		x.track(j, x.now())
		x.holdSnoozed(j, nb)
		return
	}
	if x.topicPaused(k.Topic) {
		x.queued++ // as queued, and at once waiting for the pause
		x.halt(j, x.now())
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
		x.track(j, x.now())
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
	for x.running < x.conc && x.queued > 0 && x.cfg.Rate.take(x.now()) {
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

// startMargin is the least time left on a record's lock for its job to be
// started (or a quarter of the lock, if less).
const startMargin = 500 * time.Millisecond

// start runs j's handler, unless its lock is about to run out or its
// topic is paused (then it waits for the pause).
func (x *executor) start(j *xjob) {
	now := x.now()
	if x.topicPaused(j.job.Topic) {
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
		x.log.Warn("lock expired before the job started; releasing it", "record", j.key())
		x.finish(j, AckRelease, OutcomeInterrupted, ErrLockExpired, 0)
		return
	}
	if x.handlerFor(j.job.Topic) == nil { // cannot happen: the member fetches registered topics only
		x.finish(j, AckRelease, OutcomeInterrupted, fmt.Errorf("worker: no handler for topic %q", j.job.Topic), 0)
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
	j.run = x.handlerFor(j.job.Topic)
	j.state, j.ran, j.start = jobRunning, true, now
	if x.rate == 0 && x.firstReadings == 0 {
		x.beginReadings(now)
	}
	_, j.fences = x.m.Standing()
	if !j.tracked {
		x.trackLater(j, now)
	}
	if x.obs != nil {
		x.obs.JobStarted(&j.job)
	}
	x.launch(j)
}

// handlerFor returns topic's handler and job timeout; nil: the topic has
// no handler. It keeps the last topic's, found again without hashing its
// name (a record's topic is one string per topic, from the member's
// decoder, and compares by its pointer first).
func (x *executor) handlerFor(topic string) *topicHandler {
	if l := x.lastHandler; l != nil && l.topic == topic {
		return l
	}
	th := x.handlers[topic]
	if th == nil {
		h := x.cfg.Handlers[topic]
		if h == nil {
			return nil
		}
		th = &topicHandler{topic: topic, h: h, timeout: x.cfg.Timeouts[topic]}
		if x.handlers == nil {
			x.handlers = map[string]*topicHandler{}
		}
		x.handlers[topic] = th
	}
	x.lastHandler = th
	return th
}

// topicHandler is a topic's handler and job timeout (0: none), as
// handlerFor keeps them; it does not change once made, and a job's
// handler goroutine reads it (xjob.run).
type topicHandler struct {
	topic   string
	h       handler.Handler
	timeout time.Duration
}

// launch hands j, set up to run, to a handler goroutine.
func (x *executor) launch(j *xjob) {
	x.armFor(j)
	x.running++
	if x.spawned < x.running {
		x.spawned++
		x.wg.Add(1)
		go x.handle()
	}
	x.hand.push(j)
}

// handle is a handler goroutine: it runs jobs until work closes.
func (x *executor) handle() {
	defer x.wg.Done()
	wake := make(chan struct{}, 1)
	var r xresult
	var last *xresult // &r once it holds the result of the job before, to give back with the next take
	var start time.Time
	for {
		j, parked, ok := x.hand.next(last, wake)
		if !ok {
			return
		}
		if parked || last == nil {
			start = time.Now()
		} // else the job starts when the last one ended: one clock reading a job
		r = xresult{j: j, err: runJob(j)}
		end := time.Now()
		r.took = end.Sub(start)
		start = end
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
		last = &r
	}
}

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
	if j.run.timeout <= 0 {
		return safehandle.Handle(j.ctx, j.run.h, &j.job)
	}
	ctx, cancel := context.WithTimeoutCause(j.ctx, j.run.timeout, ErrJobTimeout)
	defer cancel()
	err := safehandle.Handle(ctx, j.run.h, &j.job)
	if err != nil && errors.Is(context.Cause(ctx), ErrJobTimeout) && !handler.IsPermanent(err) && !doneWith(err) {
		err = &handler.RetryError{Reason: handler.ReasonTimeout, Err: fmt.Errorf("%w after %v: %w", ErrJobTimeout, j.run.timeout, err)}
	}
	return err
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
