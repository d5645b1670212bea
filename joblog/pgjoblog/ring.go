package pgjoblog

// ring is a bounded FIFO of runs that drops its oldest when full.
type ring struct {
	runs  []Run
	start int // index of the oldest
	n     int
}

func newRing(size int) ring { return ring{runs: make([]Run, size)} }

func (r *ring) len() int { return r.n }

// push appends run, dropping the oldest when the ring is full; it reports
// whether it dropped one.
func (r *ring) push(run Run) (dropped bool) {
	if r.n == len(r.runs) {
		r.runs[r.start] = run
		r.start = (r.start + 1) % len(r.runs)
		return true
	}
	r.runs[(r.start+r.n)%len(r.runs)] = run
	r.n++
	return false
}

// take removes and returns up to max of the oldest runs.
func (r *ring) take(max int) []Run {
	k := min(max, r.n)
	out := make([]Run, k)
	for i := range out {
		j := (r.start + i) % len(r.runs)
		out[i] = r.runs[j]
		r.runs[j] = Run{}
	}
	r.start = (r.start + k) % len(r.runs)
	r.n -= k
	return out
}

// putBack returns runs, older than every run in the ring, to its front,
// as many as fit (the newest of them); it returns how many did not fit.
func (r *ring) putBack(runs []Run) (lost int) {
	free := len(r.runs) - r.n
	if len(runs) > free {
		lost = len(runs) - free
		runs = runs[lost:]
	}
	for i := len(runs) - 1; i >= 0; i-- {
		r.start = (r.start - 1 + len(r.runs)) % len(r.runs)
		r.runs[r.start] = runs[i]
		r.n++
	}
	return lost
}
