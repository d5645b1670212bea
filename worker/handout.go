package worker

import "sync"

// handOut is how run hands the jobs it started to the handler goroutines:
// a queue under a mutex, from which a goroutine done with a job takes the
// next before it parks, so that a burst of short jobs keeps the goroutines
// that are awake busy instead of waking one parked goroutine per job (a
// channel hands each job to a parked receiver and wakes it: a park and a
// wake-up a job, a fifth to a third of the worker's CPU with no-op jobs).
//
// run pushes the jobs it starts in a turn of its loop to a slice of its
// own and hands them over together at the end of the turn (flush): one
// lock and at most one wake-up for all of them.
//
// Goroutines are woken one at a time: a flush wakes a parked goroutine
// unless one is being woken already, and a goroutine that takes a job and
// leaves more behind wakes the next. So while jobs wait here, a goroutine
// is always on its way to take one; jobs that block (I/O) fan out over
// the parked goroutines one wake-up after another, microseconds apart,
// and no-op jobs are taken by the goroutines already awake. Since run
// starts at most Concurrency jobs and starts a goroutine whenever fewer
// exist than jobs started and not yet ended, there is a goroutine free
// for every job queued here.
type handOut struct {
	started []*xjob // run's: jobs pushed since the last flush

	mu     sync.Mutex
	queue  []*xjob         // guarded by mu: started jobs no goroutine took yet, oldest first from head
	head   int             // guarded by mu
	parked []chan struct{} // guarded by mu: the parked goroutines' wake-ups, most recently parked last
	waking bool            // guarded by mu: a parked goroutine was woken and has not taken the lock since
	closed bool            // guarded by mu: no job comes any more (close)
}

// push queues j for a handler goroutine at the next flush; run only.
func (o *handOut) push(j *xjob) { o.started = append(o.started, j) }

// flush hands the jobs pushed since the last flush to the handler
// goroutines; run only.
func (o *handOut) flush() {
	if len(o.started) == 0 {
		return
	}
	o.mu.Lock()
	o.queue = append(o.queue, o.started...)
	o.wakeLocked()
	o.mu.Unlock()
	clear(o.started)
	o.started = o.started[:0]
}

// close lets every handler goroutine return once the queue is empty; run
// only, once.
func (o *handOut) close() {
	o.mu.Lock()
	o.closed = true
	for _, w := range o.parked {
		w <- struct{}{}
	}
	o.parked = nil
	o.mu.Unlock()
}

// next returns the next job for the handler goroutine whose wake-up is w,
// parking it while there is none; false once the queue is closed and
// empty.
func (o *handOut) next(w chan struct{}) (*xjob, bool) {
	o.mu.Lock()
	for o.head == len(o.queue) {
		if o.closed {
			o.mu.Unlock()
			return nil, false
		}
		o.parked = append(o.parked, w)
		o.mu.Unlock()
		<-w
		o.mu.Lock()
		o.waking = false // this goroutine was the one woken (or close woke all)
	}
	j := o.queue[o.head]
	o.queue[o.head] = nil
	o.head++
	if o.head == len(o.queue) {
		o.queue, o.head = o.queue[:0], 0
	} else if o.head >= 64 && 2*o.head >= len(o.queue) {
		n := copy(o.queue, o.queue[o.head:])
		clear(o.queue[n:])
		o.queue, o.head = o.queue[:n], 0
	}
	o.wakeLocked()
	o.mu.Unlock()
	return j, true
}

// wakeLocked wakes the most recently parked goroutine if a job waits and
// no goroutine is being woken already; o.mu held.
func (o *handOut) wakeLocked() {
	if o.waking || o.head == len(o.queue) || len(o.parked) == 0 {
		return
	}
	n := len(o.parked) - 1
	w := o.parked[n]
	o.parked[n] = nil
	o.parked = o.parked[:n]
	o.waking = true
	w <- struct{}{} // buffered 1, and w's goroutine was parked: never blocks
}
