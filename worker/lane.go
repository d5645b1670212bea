package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/renew"
)

// startMargin is the least time left on a record's lock for its job to be
// started (or a quarter of the lock, if less).
const startMargin = 500 * time.Millisecond

// fetchLandMargin is how long past FetchMaxWait a share fetch that was in
// flight when its lane stopped fetching may take to land in the client's
// buffer.
const fetchLandMargin = 500 * time.Millisecond

// ackFlushTimeout bounds a FlushAcks call: a renewal and the final flush.
const ackFlushTimeout = 10 * time.Second

// lane is one share-group member: a client and the goroutine that owns its
// polls, acknowledgements and renewals.
type lane struct {
	w       *Worker
	id      int
	cl      *kgo.Client
	log     *slog.Logger
	results chan result // outcomes from handler goroutines

	ackMu   sync.Mutex
	ackErrs map[topicPartition]error // failures reported by the ack callback

	// Owned by the lane goroutine.
	seq     uint64
	jobs    map[uint64]*running
	tracker *renew.Tracker[uint64]
	lockDur time.Duration // longest lock duration seen on this lane
	stopped bool          // the lane stopped fetching (stopFetching)
}

type topicPartition struct {
	topic     string
	partition int32
}

type running struct {
	rec    *kgo.Record
	job    *handler.Job
	cancel context.CancelCauseFunc
	start  time.Time
	ran    bool

	// A job whose handler failed with a retryable error is held until
	// releaseAt before it is released (retry backoff); res is its outcome.
	releaseAt time.Time
	res       result
}

// backingOff reports whether the handler returned and the record is held
// for its retry backoff.
func (r *running) backingOff() bool { return !r.releaseAt.IsZero() }

type result struct {
	seq  uint64
	err  error
	took time.Duration
}

func (w *Worker) newLane(id int) (*lane, error) {
	l := &lane{
		w:       w,
		id:      id,
		log:     w.cfg.logger.With("group", w.cfg.group, "lane", id),
		results: make(chan result, w.cfg.concurrency),
		ackErrs: make(map[topicPartition]error),
		jobs:    make(map[uint64]*running),
		tracker: renew.NewTracker[uint64](renew.Policy{Margin: w.cfg.renewMargin, MaxHold: w.cfg.maxHold}),
	}
	opts := append(w.baseOpts(),
		kgo.ShareGroup(w.cfg.group),
		kgo.ConsumeTopics(w.topics...),
		kgo.ShareMaxRecords(int32(w.cfg.batchSize)),
		kgo.ShareMaxRecordsStrict(),
		kgo.FetchMaxWait(w.cfg.fetchMaxWait),
		kgo.ShareAckCallback(l.onAcks),
		// A lane's connection is idle while it holds a batch; renewals
		// keep it busy at least every half lock period. Keep it open for
		// locks of up to 20 minutes.
		kgo.ConnIdleTimeout(10*time.Minute),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("worker: lane client: %w", err)
	}
	l.cl = cl
	return l, nil
}

// onAcks is the client's ShareAckCallback; it runs on client goroutines.
func (l *lane) onAcks(_ *kgo.Client, rs kgo.ShareAckResults) {
	for _, r := range rs {
		if r.Err == nil {
			continue
		}
		l.log.Warn("broker rejected acknowledgements", "topic", r.Topic, "partition", r.Partition, "error", r.Err)
		if o := l.w.cfg.observer; o != nil {
			o.AckFailed(r.Topic, r.Partition, r.Err)
		}
		l.ackMu.Lock()
		l.ackErrs[topicPartition{r.Topic, r.Partition}] = r.Err
		l.ackMu.Unlock()
	}
}

func (l *lane) takeAckErrs() map[topicPartition]error {
	l.ackMu.Lock()
	defer l.ackMu.Unlock()
	errs := l.ackErrs
	l.ackErrs = make(map[topicPartition]error)
	return errs
}

func (l *lane) setActive(delta int32) {
	n := l.w.lanesActive.Add(delta)
	if o := l.w.cfg.observer; o != nil {
		o.LanesActive(int(n))
	}
}

// run polls and processes batches until ctx is done, then stops: it
// finishes the batch in hand within the shutdown deadline, stops
// fetching, runs what the fetches in flight brought in, flushes acks and
// closes the client.
func (l *lane) run(ctx context.Context, sd *shutdown) {
	l.setActive(1)
	defer l.setActive(-1)
	defer l.cl.Close() // releases anything not acknowledged
	defer l.flush()

	l.work(ctx, sd)
	l.stopFetching(sd)
	l.drain(ctx, sd)
}

// stopFetching pauses the lane's client so it sends no more share fetches,
// and tells the shutdown. Held jobs are released, and buffered records
// drained, only once every lane has stopped fetching (sd.quiet): a record
// released while another lane of this worker still has a fetch waiting at
// the broker could be acquired by that fetch, and a client that closes
// holding an unpolled record releases it, which on the record's last
// delivery makes the broker archive it without any handler having seen
// it.
func (l *lane) stopFetching(sd *shutdown) {
	if l.stopped {
		return
	}
	l.stopped = true
	l.cl.PauseFetchTopics(l.w.topics...)
	sd.laneStopped()
}

// drain runs the records the lane's client fetched after the lane last
// polled, until the buffer is empty or the shutdown deadline passes. The
// client strips paused topics from what a poll returns (and releases
// them), so each poll resumes the topics and pauses them again; a fetch
// the client sends between the two is drained in the next round.
func (l *lane) drain(ctx context.Context, sd *shutdown) {
	ectx := sd.expired // done at the shutdown deadline
	select {
	case <-sd.quiet:
	case <-ectx.Done():
		return
	}
	batch := int64(l.w.cfg.batchSize)
	for ectx.Err() == nil {
		n := min(l.cl.BufferedFetchRecords(), batch)
		if n == 0 {
			return
		}
		if err := l.w.slots.acquire(ectx, n, true); err != nil {
			return
		}
		l.cl.ResumeFetchTopics(l.w.topics...)
		pctx, pcancel := context.WithTimeout(ectx, 100*time.Millisecond)
		recs := l.cl.PollRecords(pctx, int(n)).Records()
		pcancel()
		l.cl.PauseFetchTopics(l.w.topics...)
		if m := int64(len(recs)); m < n {
			l.w.slots.release(n - m)
		}
		if len(recs) == 0 {
			return
		}
		l.log.Info("running jobs fetched while the worker was stopping", "jobs", len(recs))
		l.runBatch(ctx, sd, recs, time.Now())
		sleep(ectx, l.w.cfg.fetchMaxWait+fetchLandMargin)
	}
}

// work polls and processes batches until ctx is done and the batch in
// hand is finished.
func (l *lane) work(ctx context.Context, sd *shutdown) {
	batch := int64(l.w.cfg.batchSize)
	fetchWait := l.w.cfg.fetchMaxWait
	var held int64 // pool slots this lane holds for its next batch
	defer func() {
		if held > 0 {
			l.w.slots.release(held)
		}
	}()
	hot := false // the last poll brought records
	var backoff, idle time.Duration
	for ctx.Err() == nil {
		// Poll only with room in the pool for a whole batch, so no record
		// waits for a handler while its lock runs.
		if held == 0 {
			// Records a late fetch left in the buffer wait with their
			// locks running: go first, as a lane whose last poll had
			// records does.
			if err := l.w.slots.acquire(ctx, batch, hot || l.cl.BufferedFetchRecords() > 0); err != nil {
				return
			}
			held = batch
		}
		// A lane fetches only from the partitions the group assigns it,
		// so it must not sit on pool slots while they are empty: polls are
		// bounded, briefly when other lanes wait for slots.
		window := max(10*fetchWait, 500*time.Millisecond)
		if l.w.slots.waiting() {
			window = 2*fetchWait + 100*time.Millisecond
		}
		pctx, cancel := context.WithTimeout(ctx, window)
		fetches := l.cl.PollRecords(pctx, int(batch))
		timedOut := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		polled := time.Now()
		recs := fetches.Records()
		if len(recs) == 0 {
			hot = false
			if l.pollErrors(fetches) {
				l.w.slots.release(held)
				held = 0
				backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
				sleep(ctx, backoff)
				continue
			}
			if timedOut && l.w.slots.waiting() {
				// The fetch that was in flight when the poll ended can
				// still bring records into the client's buffer, locked
				// to this lane: wait it out and take them, or else give
				// the slots to a waiting lane.
				sleep(ctx, fetchWait+100*time.Millisecond)
				if l.cl.BufferedFetchRecords() == 0 {
					l.w.slots.release(held)
					held = 0
					// Stand back a while, longer the longer this lane
					// finds nothing, so lanes with work get the slots.
					// A fetch that lands meanwhile ends the wait.
					idle = min(max(2*idle, 100*time.Millisecond), 2*time.Second)
					for end := time.Now().Add(idle); ctx.Err() == nil && time.Now().Before(end) && l.cl.BufferedFetchRecords() == 0; {
						sleep(ctx, min(50*time.Millisecond, time.Until(end)))
					}
				}
			}
			continue
		}
		hot, backoff, idle = true, 0, 0
		// The slots now belong to the jobs: each job's goroutine gives
		// its slot back when its handler returns.
		if n := int64(len(recs)); n < held {
			l.w.slots.release(held - n)
		} else if n > held {
			// Not expected with strict batches; take the extra room.
			_ = l.w.slots.acquire(context.WithoutCancel(ctx), n-held, true)
		}
		held = 0
		l.runBatch(ctx, sd, recs, polled)
	}
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// pollErrors logs a poll's errors and reports whether there were any
// besides the client closing or ctx ending.
func (l *lane) pollErrors(fs kgo.Fetches) bool {
	any := false
	fs.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		any = true
		l.log.Warn("poll error", "topic", topic, "partition", partition, "error", err)
	})
	return any
}

// runBatch starts every job of a poll and acknowledges each record as its
// outcome comes back. It returns when every record has a terminal ack.
func (l *lane) runBatch(ctx context.Context, sd *shutdown, recs []*kgo.Record, polled time.Time) {
	for _, rec := range recs {
		l.seq++
		seq := l.seq
		deadline := rec.AcquisitionDeadline()
		if d := deadline.Sub(polled); d > l.lockDur {
			l.lockDur = d
		}
		job := l.w.toJob(rec)
		// The client's deadline is its receive time plus the time left the
		// broker reported, so it can be a little optimistic: do not start
		// a job whose lock is about to run out.
		// On its last delivery the job runs all the same: a release would
		// make the broker archive it unhandled and unparked, while a run
		// renews the lock at once if it can, and a dlq middleware parks
		// the job if it fails.
		if renew.Expired(time.Now(), deadline, min(startMargin, l.lockDur/4)) && !job.LastDelivery() {
			l.log.Warn("lock expired before the job started; releasing it", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
			l.ack(&running{rec: rec, job: job}, AckRelease, ErrLockExpired, 0, time.Time{})
			l.w.slots.release(1)
			continue
		}
		h := l.w.handlers[rec.Topic]
		if h == nil { // cannot happen: the lane consumes registered topics only
			l.ack(&running{rec: rec, job: job}, AckRelease, fmt.Errorf("worker: no handler for topic %q", rec.Topic), 0, time.Time{})
			l.w.slots.release(1)
			continue
		}
		jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		r := &running{rec: rec, job: job, cancel: cancel, start: time.Now(), ran: true}
		l.jobs[seq] = r
		l.tracker.Add(seq, polled, deadline, l.lockDur)
		if o := l.w.cfg.observer; o != nil {
			o.JobStarted(job)
		}
		results := l.results
		l.w.pool.Go(func() {
			defer l.w.slots.release(1)
			start := time.Now()
			err := safeHandle(jctx, h, job)
			results <- result{seq: seq, err: err, took: time.Since(start)}
		})
	}

	stopping := ctx.Done()
	var expired, quiet <-chan struct{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// The wake-up time is recomputed only when it can move earlier: after
	// a wake-up (renewals move deadlines) or a new retry hold. A finished
	// job can only make it later, and waking early is harmless; computing
	// it after every result would cost O(batch²) per batch.
	var wake <-chan time.Time
	rearm := func() {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wake = nil
		if next, ok := l.nextWake(); ok {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
	}
	rearm()
	for len(l.jobs) > 0 {
		select {
		case res := <-l.results:
			r, ok := l.jobs[res.seq]
			if !ok {
				continue // abandoned earlier; its record was released
			}
			ack := AckAccept
			switch {
			case res.err == nil:
			case handler.IsPermanent(res.err):
				ack = AckReject
			default:
				ack = AckRelease
				d := l.backoff(r)
				if stopping == nil {
					// Stopping: no backoff, but no release either until
					// the worker has stopped fetching (stopFetching).
					d = 0
					if !sd.isQuiet() {
						d = l.w.cfg.shutdownTimeout // released when quiet closes
					}
				}
				if d > 0 {
					// Hold the record, its lock renewed as needed, so
					// the next delivery does not come at once: a failing
					// dependency would otherwise use up the delivery
					// limit in moments.
					r.releaseAt, r.res = time.Now().Add(d), res
					rearm()
					continue
				}
			}
			l.finish(res.seq, r, ack, res.err, res.took)
		case <-wake:
			wake = nil // the timer fired: its channel is drained
			l.renewDue()
			l.releaseDue(false)
			rearm()
		case <-stopping:
			stopping = nil
			expired, quiet = sd.expired.Done(), sd.quiet
			l.stopFetching(sd)
		case <-quiet:
			quiet = nil
			l.releaseDue(true)
		case <-expired:
			for seq, r := range l.jobs {
				l.abandon(seq, r, ErrShutdown)
			}
		}
	}
}

// backoff returns how long to hold a job that failed with a retryable
// error before releasing it: none on its last delivery (the broker
// archives it either way) and never past MaxHold.
func (l *lane) backoff(r *running) time.Duration {
	f := l.w.cfg.retryBackoff
	if f == nil || r.job.LastDelivery() {
		return 0
	}
	d := f(r.job.DeliveryCount)
	if limit := time.Until(r.start.Add(l.w.cfg.maxHold)) - time.Second; d > limit {
		d = limit
	}
	return d
}

// nextWake returns when the lane must next act on its own: a renewal, a
// MaxHold, or the end of a retry backoff.
func (l *lane) nextWake() (time.Time, bool) {
	next, ok := l.tracker.Next()
	for _, r := range l.jobs {
		if r.backingOff() && (!ok || r.releaseAt.Before(next)) {
			next, ok = r.releaseAt, true
		}
	}
	return next, ok
}

// releaseDue releases held jobs whose backoff is over, or all of them.
func (l *lane) releaseDue(all bool) {
	now := time.Now()
	for seq, r := range l.jobs {
		if r.backingOff() && (all || !now.Before(r.releaseAt)) {
			l.finish(seq, r, AckRelease, r.res.err, r.res.took)
		}
	}
}

func (l *lane) finish(seq uint64, r *running, ack Ack, err error, took time.Duration) {
	deadline := l.tracker.Deadline(seq)
	delete(l.jobs, seq)
	l.tracker.Remove(seq)
	r.cancel(nil)
	l.ack(r, ack, err, took, deadline)
}

// abandon releases a job whose handler is still running and cancels its
// context with cause; whatever the handler returns later is discarded.
func (l *lane) abandon(seq uint64, r *running, cause error) {
	deadline := l.tracker.Deadline(seq)
	delete(l.jobs, seq)
	l.tracker.Remove(seq)
	r.cancel(cause)
	l.log.Warn("releasing a running job", "reason", cause, "topic", r.rec.Topic, "partition", r.rec.Partition,
		"offset", r.rec.Offset, "running_for", time.Since(r.start).Round(time.Millisecond), "lock_left", time.Until(deadline).Round(time.Millisecond))
	l.ack(r, AckRelease, cause, time.Since(r.start), deadline)
}

// ack sends the terminal acknowledgement for r; deadline is the lock
// deadline as tracked (zero: the one the record arrived with).
func (l *lane) ack(r *running, ack Ack, err error, took time.Duration, deadline time.Time) {
	switch ack {
	case AckAccept:
		r.rec.Ack(kgo.AckAccept)
	case AckReject:
		r.rec.Ack(kgo.AckReject)
	default:
		r.rec.Ack(kgo.AckRelease)
	}
	if o := l.w.cfg.observer; o != nil {
		if deadline.IsZero() {
			deadline = r.job.LockDeadline
		}
		final := ack != AckRelease || r.job.LastDelivery()
		o.JobFinished(r.job, Result{Ack: ack, Err: err, Ran: r.ran, Duration: took, LockLeft: time.Until(deadline), Final: final})
	}
}

// renewDue renews the locks that are due and releases jobs over MaxHold or
// whose lock was lost.
func (l *lane) renewDue() {
	now := time.Now()
	due, over := l.tracker.Due(now)
	for _, seq := range over {
		if r, ok := l.jobs[seq]; ok {
			if r.backingOff() {
				l.finish(seq, r, AckRelease, r.res.err, r.res.took)
				continue
			}
			l.abandon(seq, r, ErrMaxHold)
		}
	}
	if len(due) == 0 {
		return
	}
	for _, seq := range due {
		l.jobs[seq].rec.Ack(kgo.AckRenew)
	}
	l.takeAckErrs()
	sentAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), ackFlushTimeout)
	flushErr := l.cl.FlushAcks(ctx)
	cancel()
	errs := l.takeAckErrs()
	now = time.Now()
	for _, seq := range due {
		r := l.jobs[seq]
		err := flushErr
		if e := errs[topicPartition{r.rec.Topic, r.rec.Partition}]; e != nil {
			err = e
		}
		if o := l.w.cfg.observer; o != nil {
			o.LockRenewed(r.job, err)
		}
		if err == nil {
			l.tracker.Renewed(seq, sentAt)
			continue
		}
		l.log.Warn("lock renewal failed", "topic", r.rec.Topic, "partition", r.rec.Partition, "offset", r.rec.Offset, "error", err)
		if !l.tracker.Deadline(seq).After(now) {
			l.abandon(seq, r, ErrLockLost)
			continue
		}
		l.tracker.RenewFailed(seq, now.Add(250*time.Millisecond))
	}
}

// flush sends queued acknowledgements before the client closes.
func (l *lane) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), ackFlushTimeout)
	defer cancel()
	if err := l.cl.FlushAcks(ctx); err != nil {
		l.log.Warn("flushing acknowledgements at shutdown", "error", err)
	}
}

// safeHandle runs h, turning a panic that escaped every middleware into a
// permanent failure.
func safeHandle(ctx context.Context, h handler.Handler, job *handler.Job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &handler.PermanentError{Reason: handler.ReasonPanic, Err: &handler.PanicError{Value: v}}
		}
	}()
	return h.Handle(ctx, job)
}

func (w *Worker) toJob(rec *kgo.Record) *handler.Job {
	j := &handler.Job{
		Topic:         rec.Topic,
		Partition:     rec.Partition,
		Offset:        rec.Offset,
		Key:           rec.Key,
		Value:         rec.Value,
		Timestamp:     rec.Timestamp,
		Group:         w.cfg.group,
		DeliveryCount: rec.DeliveryCount(),
		DeliveryLimit: w.deliveryLimit.Load(),
		LockDeadline:  rec.AcquisitionDeadline(),
	}
	if len(rec.Headers) > 0 {
		j.Headers = make([]handler.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			j.Headers[i] = handler.Header{Key: h.Key, Value: h.Value}
		}
	}
	return j
}
