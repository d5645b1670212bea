package worker

import "sync"

// handoff is where run and the handler goroutines meet: run hands them
// the jobs it starts, and they leave it their results, both under one
// mutex, so that a handler goroutine gives back one job's result and
// takes its next job in one lock.
//
// Jobs: run pushes the jobs it starts in a turn of its loop to a slice
// of its own and hands them over together at the end of the turn
// (flush): one lock and at most one wake-up for all of them. A goroutine
// done with a job takes the next one queued before it parks, so a burst
// of short jobs keeps the goroutines that are awake busy instead of
// waking a parked goroutine for every job (a channel of jobs did: a park
// and a wake-up a job, a fifth to a third of the worker's CPU with no-op
// jobs). Parked goroutines are woken one at a time: a flush wakes one
// unless one is being woken already, and a goroutine that takes a job
// and leaves more behind wakes the next. So while jobs wait here, a
// goroutine is on its way to take one; jobs that block (I/O) fan out over
// the parked goroutines one wake-up after another, microseconds apart.
// Since run starts at most Concurrency jobs, and starts a goroutine
// whenever fewer exist than jobs started and not yet ended, a goroutine
// is free for every job queued here. Wake-ups (and the signal of a
// result) are sent once the mutex is let go, so that the goroutine woken
// does not run only to wait for it.
//
// Results: queued with a signal on ready each time the queue goes from
// empty to not, so that the results of a burst of short jobs cost run
// one wake-up and one turn of its loop between them, not one each.
// Whenever the queue holds a result, a signal is pending on ready or run
// is about to take it.
type handoff struct {
	ready   chan struct{} // buffered 1: a result is queued; handler goroutines send, run receives
	started []*xjob       // run's: jobs pushed since the last flush
	spare   []xresult     // run's: the slice take hands back next time

	mu      sync.Mutex
	jobs    []*xjob         // guarded by mu: started jobs no goroutine took yet, oldest first from head
	head    int             // guarded by mu
	parked  []chan struct{} // guarded by mu: the parked goroutines' wake-ups, most recently parked last
	waking  bool            // guarded by mu: a parked goroutine was woken and has not taken the lock since
	closed  bool            // guarded by mu: no job comes any more (close)
	results []xresult       // guarded by mu: results run has not taken, oldest first
}

func newHandoff() *handoff { return &handoff{ready: make(chan struct{}, 1)} }

// push queues j for a handler goroutine at the next flush; run only.
func (o *handoff) push(j *xjob) { o.started = append(o.started, j) }

// flush hands the jobs pushed since the last flush to the handler
// goroutines; run only.
func (o *handoff) flush() {
	if len(o.started) == 0 {
		return
	}
	o.mu.Lock()
	o.jobs = append(o.jobs, o.started...)
	w := o.toWake()
	o.mu.Unlock()
	wake(w)
	clear(o.started)
	o.started = o.started[:0]
}

// take returns the results queued, oldest first; run only. The slice is
// valid until the next take.
func (o *handoff) take() []xresult {
	clear(o.spare) // the jobs of the last take, for the collector
	o.mu.Lock()
	rs := o.results
	o.results = o.spare[:0]
	o.mu.Unlock()
	o.spare = rs
	return rs
}

// close lets every handler goroutine return once no job is queued; run
// only, once, after its last flush.
func (o *handoff) close() {
	o.mu.Lock()
	o.closed = true
	for _, w := range o.parked {
		w <- struct{}{}
	}
	o.parked = nil
	o.mu.Unlock()
}

// next queues *r, the result of the calling handler goroutine's last job
// (nil: none), and clears it (a parked goroutine keeps no job alive); it
// returns its next job, parking the goroutine (w is its
// wake-up, buffered 1) while there is none; parked reports whether it
// did. ok is false once close was called and no job is queued.
func (o *handoff) next(r *xresult, w chan struct{}) (j *xjob, parked, ok bool) {
	o.mu.Lock()
	signal := false // run is to be told of a result, once o.mu is let go
	if r != nil {
		o.results = append(o.results, *r)
		*r = xresult{}
		signal = len(o.results) == 1
	}
	for o.head == len(o.jobs) {
		if o.closed {
			o.mu.Unlock()
			o.signal(signal)
			return nil, parked, false
		}
		o.parked = append(o.parked, w)
		o.mu.Unlock()
		o.signal(signal)
		signal = false
		<-w
		parked = true
		o.mu.Lock()
		o.waking = false // this goroutine was the one woken (or close woke all)
	}
	j, o.jobs, o.head = takeHead(o.jobs, o.head)
	next := o.toWake()
	o.mu.Unlock()
	o.signal(signal)
	wake(next)
	return j, parked, true
}

// signal tells run that a result is queued, if yes.
func (o *handoff) signal(yes bool) {
	if yes {
		select {
		case o.ready <- struct{}{}:
		default: // a signal is pending already
		}
	}
}

// toWake takes the parked goroutine to wake, the most recently parked,
// if a job waits and no goroutine is being woken already; nil: none.
// o.mu held; the caller wakes it (wake) once it let go of o.mu, so that
// the goroutine woken does not run only to wait for the lock.
func (o *handoff) toWake() chan struct{} {
	if o.waking || o.head == len(o.jobs) || len(o.parked) == 0 {
		return nil
	}
	n := len(o.parked) - 1
	w := o.parked[n]
	o.parked[n] = nil
	o.parked = o.parked[:n]
	o.waking = true
	return w
}

// wake wakes the goroutine parked on w, if any.
func wake(w chan struct{}) {
	if w != nil {
		w <- struct{}{} // buffered 1, and its goroutine was parked: never blocks
	}
}
