package shareqotel

import (
	"sync"

	"github.com/shareq/shareq/handler"
)

// runMap maps the *handler.Job the worker hands to JobStarted, the
// middleware and JobFinished to that job's run. It is a map per shard
// under a mutex rather than a sync.Map: an entry costs no allocation, and
// the worker's loop stores and deletes one per job. Safe for concurrent
// use.
type runMap struct {
	shards [32]struct {
		mu sync.Mutex
		m  map[*handler.Job]*run
	}
}

// shard picks a shard by the record's place, which the job keeps while
// it is in the map.
func (rm *runMap) shard(job *handler.Job) int {
	return int((uint64(job.Offset)*31 + uint64(job.Partition)) % uint64(len(rm.shards)))
}

func (rm *runMap) store(job *handler.Job, r *run) {
	s := &rm.shards[rm.shard(job)]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[*handler.Job]*run)
	}
	s.m[job] = r
	s.mu.Unlock()
}

func (rm *runMap) load(job *handler.Job) *run {
	s := &rm.shards[rm.shard(job)]
	s.mu.Lock()
	r := s.m[job]
	s.mu.Unlock()
	return r
}

func (rm *runMap) loadAndDelete(job *handler.Job) *run {
	s := &rm.shards[rm.shard(job)]
	s.mu.Lock()
	r, ok := s.m[job]
	if ok {
		delete(s.m, job)
	}
	s.mu.Unlock()
	return r
}
