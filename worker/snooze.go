package worker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// Snoozer keeps the copy of a snoozed job until it is due and then
// produces it to its topic: pgoutbox.Snoozer keeps it in the Postgres
// outbox. Give one to [SnoozeVia].
type Snoozer interface {
	// Snooze stores rec, the job's copy with its headers set, to be
	// produced at due. key identifies this copy: a second Snooze with
	// the same key (the job snoozed again after a worker died before it
	// accepted the original) must store nothing and return nil.
	Snooze(ctx context.Context, rec *kgo.Record, due time.Time, key string) error
}

// SnoozeVia has the worker keep the copies of jobs snoozed for longer
// than a minute in s (pgoutbox.Snoozer: the Postgres outbox) instead of
// in Kafka. Without it a snoozed job is held in the worker, its lock
// renewed and no handler slot taken, until it is due or until [MaxHold];
// then its copy is produced back to its topic, and whichever worker
// fetches the copy holds it until it is due. A held record keeps its
// share partition's in-flight window (share.partition.max.record.locks,
// 2,000 records by default) from moving past it, so on a busy topic many
// long snoozes are better kept in the outbox.
func SnoozeVia(s Snoozer) Option {
	return optionFunc(func(c *config) { c.snoozer = s })
}

const (
	// snoozeHoldMax is the longest snooze held in the worker when a
	// Snoozer is set; a longer one is copied to the Snoozer at once.
	snoozeHoldMax = time.Minute
	// copyTimeout bounds the writing of one snoozed job's copy.
	copyTimeout = 30 * time.Second
)

// errNoCopier: the executor has no way to copy a job (a test's executor
// without a producer).
var errNoCopier = errors.New("no producer to copy the job with")

// copyResult is the end of one copy's writing.
type copyResult struct {
	j   *xjob
	err error
	// viaSnoozer: the Snoozer wrote it (or failed to); a failed one is
	// produced to the topic instead.
	viaSnoozer bool
	rec        *kgo.Record
	due        time.Time
}

// snooze handles a handler's snooze of j for d: held in place until it
// is due, or copied for later when a Snoozer keeps long snoozes or the
// worker is stopping.
func (x *executor) snooze(j *xjob, r xresult, now time.Time) {
	j.setOutcome(nil, r.took)
	j.cancel(nil)
	setHeader(&j.job, handler.SnoozesHeader, strconv.Itoa(j.job.Snoozes()+1))
	due := now.Add(r.snooze)
	if x.stopping() || (x.cfg.Snoozer != nil && r.snooze > snoozeHoldMax) {
		x.copyOut(j, due)
		return
	}
	x.holdSnoozed(j, due)
}

// holdSnoozed holds j, its lock renewed and no slot taken, until due;
// then it runs (on the same delivery), or at MaxHold its copy is written
// (wakeUp).
func (x *executor) holdSnoozed(j *xjob, due time.Time) {
	j.state = jobSnoozed
	j.hold().releaseAt = due
	x.snoozed++
	heap.Push(&x.holds, j)
	x.arm(due)
}

// unsnooze lets a snoozed job whose time has come start: through its
// key's line if it has one, else ahead of the queue.
func (x *executor) unsnooze(j *xjob, now time.Time) {
	x.snoozed--
	if j.ks != nil {
		x.waitForKey(j, now, false)
		x.keyFreed(j.ks, now)
		return
	}
	j.state = jobWaiting
	x.waiting++
	x.ready = append(x.ready, j)
}

// copyOut writes a copy of j to run at due and, once it is written,
// accepts j (takeCopies): through the Snoozer if there is one, else
// produced to the job's topic. j keeps its lock meanwhile.
func (x *executor) copyOut(j *xjob, due time.Time) {
	x.leaveState(j)
	j.state = jobCopying
	x.copying++
	rec := snoozeCopy(&j.job, due)
	if x.cfg.Snoozer != nil {
		x.copyVia(j, rec, due)
		return
	}
	x.produceCopy(j, rec, due)
}

// copyVia writes j's copy with the Snoozer, off the run loop.
func (x *executor) copyVia(j *xjob, rec *kgo.Record, due time.Time) {
	switch {
	case x.cfg.Snoozer != nil:
		// The key is this record's: the same record copied again after a
		// worker died before accepting it stores nothing twice, while
		// each copy of a job snoozed many times has its own.
		s, key := x.cfg.Snoozer, fmt.Sprintf("%s@%s/%d/%d", j.job.ID(), j.job.Topic, j.job.Partition, j.job.Offset)
		x.copiers.Go(func() {
			ctx, cancel := context.WithTimeout(x.base, copyTimeout)
			defer cancel()
			x.copied(copyResult{j: j, err: s.Snooze(ctx, rec, due, key), viaSnoozer: true, rec: rec, due: due})
		})
	}
}

// produceCopy produces j's copy to its topic.
func (x *executor) produceCopy(j *xjob, rec *kgo.Record, due time.Time) {
	if x.cfg.Produce == nil {
		x.copied(copyResult{j: j, err: errNoCopier})
		return
	}
	ctx, cancel := context.WithTimeout(x.base, copyTimeout)
	x.cfg.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		cancel()
		x.copied(copyResult{j: j, err: err, due: due})
	})
}

// copied hands the end of j's copy to the run loop; safe for concurrent
// use, never blocks.
func (x *executor) copied(c copyResult) {
	x.copyMu.Lock()
	x.copyDone = append(x.copyDone, c)
	x.copyMu.Unlock()
	select {
	case x.copySignal <- struct{}{}:
	default:
	}
}

// takeCopies ends the jobs whose copies were written: ACCEPTed, outcome
// snoozed. A copy the Snoozer failed to keep (its database down) is
// produced to the topic instead, as without a Snoozer: the job still
// spends no delivery, and the claim middleware still runs it once. A
// copy that could not be produced either releases its job (a delivery
// spent) with a Warn.
func (x *executor) takeCopies() {
	x.copyMu.Lock()
	done := x.copyDone
	x.copyDone = nil
	x.copyMu.Unlock()
	for _, c := range done {
		x.copying--
		j := c.j
		if j.state != jobCopying || x.jobs.Get(j.key()) != j {
			continue // released meanwhile (the shutdown deadline)
		}
		if c.err == nil {
			x.finish(j, AckAccept, OutcomeSnoozed, nil, j.took())
			continue
		}
		if c.viaSnoozer {
			x.warnSnoozer(c.err)
			x.copying++
			x.produceCopy(j, c.rec, c.due)
			continue
		}
		err := fmt.Errorf("worker: copy of the snoozed job: %w", c.err)
		x.log.Warn("could not copy a snoozed job for later; releasing it, which spends a delivery", "record", j.key(), "job_id", j.job.ID(), "error", c.err)
		x.finish(j, AckRelease, OutcomeRetried, err, j.took())
	}
}

// snoozeCopy is the record that runs job again at due: its key, value and
// headers, its job ID kept (set from the record's place if the producer
// gave none), the snooze count as the job has it and the time it may run.
func snoozeCopy(job *handler.Job, due time.Time) *kgo.Record {
	rec := &kgo.Record{Topic: job.Topic, Key: job.Key, Value: job.Value}
	id := job.ID()
	rec.Headers = make([]kgo.RecordHeader, 0, len(job.Headers)+2)
	for _, h := range job.Headers {
		if h.Key == handler.NotBeforeHeader {
			continue
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if _, ok := job.Header(handler.JobIDHeader); !ok {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: handler.JobIDHeader, Value: []byte(id)})
	}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: handler.NotBeforeHeader, Value: []byte(strconv.FormatInt(ceilMilli(due), 10))})
	return rec
}

// setHeader sets job's header key to v, replacing every one of that name.
func setHeader(job *handler.Job, key, v string) {
	hs := job.Headers[:0:0]
	for _, h := range job.Headers {
		if h.Key != key {
			hs = append(hs, h)
		}
	}
	job.Headers = append(hs, handler.Header{Key: key, Value: []byte(v)})
}

// ceilMilli is t in Unix milliseconds, rounded up: a copy never runs
// before its time.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// snoozerWarnEvery bounds the Warn lines about a failing Snoozer.
const snoozerWarnEvery = time.Minute

// warnSnoozer says, at most once a minute, that the Snoozer failed and
// copies go to the topic meanwhile.
func (x *executor) warnSnoozer(err error) {
	now := time.Now()
	if now.Sub(x.snoozerWarnAt) < snoozerWarnEvery {
		return
	}
	x.snoozerWarnAt = now
	x.log.Warn("the Snoozer could not keep a snoozed job's copy; copies are produced to their topics meanwhile (held by the worker that fetches them until they are due)", "error", err)
}
