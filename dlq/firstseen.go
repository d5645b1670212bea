package dlq

import (
	"container/list"
	"sync"
	"time"
)

// firstSeen remembers, per job ID, when this process first saw the job's
// failing attempt start. It holds at most max entries and forgets the
// oldest first. Safe for concurrent use; a nil *firstSeen remembers
// nothing.
type firstSeen struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *firstEntry, oldest at the front
	byID  map[string]*list.Element
}

type firstEntry struct {
	id string
	at time.Time
}

func newFirstSeen(max int) *firstSeen {
	if max <= 0 {
		return nil
	}
	return &firstSeen{max: max, order: list.New(), byID: make(map[string]*list.Element)}
}

// remember records at for id unless id already has an earlier time.
func (f *firstSeen) remember(id string, at time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byID[id]; ok {
		return
	}
	for f.order.Len() >= f.max {
		e := f.order.Front()
		delete(f.byID, e.Value.(*firstEntry).id)
		f.order.Remove(e)
	}
	f.byID[id] = f.order.PushBack(&firstEntry{id: id, at: at})
}

func (f *firstSeen) lookup(id string) (time.Time, bool) {
	if f == nil {
		return time.Time{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.byID[id]; ok {
		return e.Value.(*firstEntry).at, true
	}
	return time.Time{}, false
}

func (f *firstSeen) forget(id string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.byID[id]; ok {
		delete(f.byID, id)
		f.order.Remove(e)
	}
}

func (f *firstSeen) len() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.order.Len()
}
