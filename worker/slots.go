package worker

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// slots is the handler pool's capacity, shared by the lanes: a lane takes
// a batch's worth before it polls and each job gives its slot back when its
// handler returns. Waiting lanes are served in order, with one preference:
// a lane whose last poll brought records (hot) goes before lanes whose
// partitions were empty (cold), so that with more lanes than slots the
// lanes that have work keep the pool busy. A cold lane that has waited
// starve longer than the first hot one goes first all the same, so every
// lane's partitions are looked at now and then.
type slots struct {
	mu     sync.Mutex
	free   int64
	hot    list.List // of *slotWaiter
	cold   list.List
	starve time.Duration
}

type slotWaiter struct {
	n     int64
	since time.Time
	ready chan struct{}
}

func newSlots(n int64, starve time.Duration) *slots {
	return &slots{free: n, starve: starve}
}

// acquire takes n slots, waiting for them until ctx is done.
func (s *slots) acquire(ctx context.Context, n int64, hot bool) error {
	s.mu.Lock()
	if s.hot.Len() == 0 && s.cold.Len() == 0 && s.free >= n {
		s.free -= n
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{n: n, since: time.Now(), ready: make(chan struct{})}
	q := &s.cold
	if hot {
		q = &s.hot
	}
	e := q.PushBack(w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			s.free += n
		default:
			q.Remove(e)
		}
		s.grant()
		s.mu.Unlock()
		return ctx.Err()
	}
}

// waiting reports whether any lane waits for slots.
func (s *slots) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hot.Len()+s.cold.Len() > 0
}

// release gives back n slots.
func (s *slots) release(n int64) {
	s.mu.Lock()
	s.free += n
	s.grant()
	s.mu.Unlock()
}

// grant hands free slots to waiters, in order; the caller holds mu.
func (s *slots) grant() {
	for {
		q := &s.hot
		if c := s.cold.Front(); c != nil {
			h := s.hot.Front()
			if h == nil || c.Value.(*slotWaiter).since.Add(s.starve).Before(h.Value.(*slotWaiter).since) {
				q = &s.cold
			}
		}
		e := q.Front()
		if e == nil {
			return
		}
		w := e.Value.(*slotWaiter)
		if s.free < w.n {
			return // first come first served: no overtaking by smaller requests
		}
		s.free -= w.n
		q.Remove(e)
		close(w.ready)
	}
}
