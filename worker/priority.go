package worker

// Priorities between the topics one worker handles ([Priority],
// [StrictPriority]).
//
// Where they act. At the fetch and at the start. A share group has no
// record priority and the broker fills a fetch from the session's
// partitions in its own order, so the member chooses which topics each
// fetch asks for (internal/member/priority.go: strict order asks only for
// the most urgent topics with records; weights ask for one topic a fetch,
// so that the records fetched follow the weights). In hand, the
// executor's queue is one FIFO per topic (a lane), and startQueued takes
// the next job from the lane strict order or the weights choose.
//
// Where they do not. Jobs let go by their key's limits (startReady), jobs
// held through a pause (reruns) and the pause's probe keep their own
// order; records of one topic keep the order they were delivered in; and
// nothing orders jobs across workers.

import (
	"fmt"
	"slices"

	"github.com/shareq/shareq/internal/member"
)

// priorityWeightMax bounds a weight: more than this is strict order by
// another name, and the weights' sum must not overflow the counters.
const priorityWeightMax = 1000

// Priority gives topic weight among the topics this worker handles:
// under a backlog of several topics, their jobs are fetched and started in
// proportion to their weights (Priority("emails", 3) beside an unweighted
// "reports" runs three emails for each report). Topics without a Priority
// weigh 1. A topic with no records takes no share and saves none for
// later: the others use its slots.
//
// Each fetch asks the broker for one topic with records, the one with
// the fewest records fetched for its weight (measured 3.00:1 for weights
// 3:1 on Kafka), and among the jobs in hand the topics start by smooth
// weighted round robin. Changing the topics a fetch asks for costs the
// fetches their partitions' adds and forgets, and the acks of a topic not
// asked for go in requests of their own. A share group has no record
// priority: nothing orders jobs across workers, and the jobs of one topic
// keep the broker's order. docs/limits.md has the details. topic must be
// registered with [Handle]; weight is from 1 to 1000; not with
// [StrictPriority].
func Priority(topic string, weight int) Option {
	return optionFunc(func(c *config) { c.weights = append(c.weights, topicWeight{topic, weight}) })
}

// StrictPriority orders the topics this worker handles: the worker
// fetches a later topic only while the earlier ones have no records for
// it, and a job of an earlier topic in hand always starts before a job of
// a later one; topics not named come after those named. With
// StrictPriority("password-resets", "newsletters"), a burst of password
// resets behind a backlog of newsletters is fetched alone and starts at
// the next free slots (measured p99 about one newsletter's duration, 200
// ms, at Concurrency 16 on Kafka). A later topic runs only while the
// earlier ones have none, so a steady stream of them starves it.
//
// The costs: while a later topic delivers, the worker probes the earlier
// ones (a fetch of them alone, without wait) at most every 20 ms; at the
// end of a burst of an earlier topic the later ones wait one empty fetch
// ([FetchMaxWait]). Like [Priority] it orders one worker's fetches and
// jobs, among its own topics; docs/limits.md has the details. Every topic
// named must be registered with [Handle], once; not with Priority; at
// most one StrictPriority per worker.
func StrictPriority(topics ...string) Option {
	return optionFunc(func(c *config) {
		c.strictCalls++
		c.strict = append(c.strict, topics...)
	})
}

// topicWeight is a [Priority] as given.
type topicWeight struct {
	topic  string
	weight int
}

// checkPriorities validates the Priority and StrictPriority options
// against the handled topics.
func (c *config) checkPriorities(handled map[string]bool, bad func(format string, args ...any)) {
	if len(c.weights) > 0 && c.strictCalls > 0 {
		bad("StrictPriority and Priority on one worker: choose strict order (StrictPriority) or weights (Priority), not both")
	}
	weighted := map[string]bool{}
	for _, tw := range c.weights {
		opt := fmt.Sprintf("Priority(%q, %d)", tw.topic, tw.weight)
		switch {
		case !handled[tw.topic]:
			bad("%s: no handler for the topic; register it with worker.Handle first", opt)
		case weighted[tw.topic]:
			bad("%s: the topic's weight is set twice", opt)
		case tw.weight < 1 || tw.weight > priorityWeightMax:
			bad("%s: the weight must be from 1 to %d (topics without a Priority weigh 1; for strict order use worker.StrictPriority)", opt, priorityWeightMax)
		}
		weighted[tw.topic] = true
	}
	if c.strictCalls > 1 {
		bad("StrictPriority given %d times: name every topic, in order, in one StrictPriority", c.strictCalls)
	}
	if c.strictCalls > 0 && len(c.strict) == 0 {
		bad("StrictPriority(): no topics; name the topics in order, the most urgent first")
	}
	named := map[string]bool{}
	for _, t := range c.strict {
		opt := fmt.Sprintf("StrictPriority(%q)", t)
		switch {
		case !handled[t]:
			bad("%s: no handler for the topic; register it with worker.Handle first", opt)
		case named[t]:
			bad("%s: the topic is named twice; name each once, the most urgent first", opt)
		}
		named[t] = true
	}
}

// topicQueues returns the per-topic queues for the worker's priorities,
// or nil when it has none: the executor then keeps one FIFO.
func (c *config) topicQueues() *topicQueues {
	switch {
	case c.strictCalls > 0:
		return newStrictQueues(c.strict)
	case len(c.weights) > 0:
		w := make(map[string]int, len(c.weights))
		for _, tw := range c.weights {
			w[tw.topic] = tw.weight
		}
		return newWeightedQueues(topicsOf(c.routes), w)
	}
	return nil
}

// fetchPriority returns the priorities for the member's fetches
// (internal/member/priority.go), or nil when the worker has none.
func (c *config) fetchPriority() *member.Priority {
	switch {
	case c.strictCalls > 0:
		return &member.Priority{Strict: slices.Clone(c.strict)}
	case len(c.weights) > 0:
		w := make(map[string]int, len(c.weights))
		for _, tw := range c.weights {
			w[tw.topic] = tw.weight
		}
		return &member.Priority{Weights: w}
	}
	return nil
}

// fifo is a queue of jobs in hand, oldest first. Jobs that left the
// queued state while in it (dropped, expired) stay until they reach the
// head, where they are skipped.
type fifo struct {
	jobs []*xjob
	head int
}

func (q *fifo) push(j *xjob) { q.jobs = append(q.jobs, j) }

// pushFront puts js, oldest first, ahead of the jobs in the queue.
func (q *fifo) pushFront(js []*xjob) {
	q.jobs = append(slices.Clip(js), q.jobs[q.head:]...)
	q.head = 0
}

// pop takes the oldest job still queued off the queue; nil: none.
func (q *fifo) pop() *xjob {
	for q.head < len(q.jobs) {
		var j *xjob
		j, q.jobs, q.head = takeHead(q.jobs, q.head)
		if j.state == jobQueued {
			return j
		}
		// dropped while it waited
	}
	return nil
}

// takeHead takes jobs[head] off a queue kept as a slice and the index of
// its head (fifo, handoff), clearing its slot: the slice is emptied once
// the head has passed all of it, and compacted once it has passed half of
// a long one.
func takeHead(jobs []*xjob, head int) (*xjob, []*xjob, int) {
	j := jobs[head]
	jobs[head] = nil
	head++
	if head == len(jobs) {
		return j, jobs[:0], 0
	}
	if head >= 1024 && 2*head >= len(jobs) {
		n := copy(jobs, jobs[head:])
		clear(jobs[n:])
		return j, jobs[:n], 0
	}
	return j, jobs, head
}

// live reports whether a job in the queue is still queued, skipping the
// dropped ones at its head.
func (q *fifo) live() bool {
	for q.head < len(q.jobs) {
		if q.jobs[q.head].state == jobQueued {
			return true
		}
		q.jobs[q.head] = nil
		q.head++
	}
	q.jobs, q.head = q.jobs[:0], 0
	return false
}

// all returns the jobs in the queue, dropped ones included.
func (q *fifo) all() []*xjob { return q.jobs[q.head:] }

func (q *fifo) reset() {
	clear(q.jobs)
	q.jobs, q.head = q.jobs[:0], 0
}

// lane is one topic's queue (or, in strict order, the topics not named).
type lane struct {
	fifo
	weight  int // Priority's weight (1 when not given)
	current int // smooth weighted round robin's counter
}

// topicQueues holds the queued jobs of a worker with priorities, a lane
// per topic, and picks the next job to start: from the first lane with a
// job in strict order, or by smooth weighted round robin (each pick adds
// every lane with a job its weight, takes the lane with the most, and
// takes the sum of those weights from it), which over a backlog starts
// the topics' jobs in the proportion of their weights, evenly mixed. A
// pick costs a pass over the lanes: O(topics). Owned by the run loop.
type topicQueues struct {
	strict bool
	lanes  []*lane          // in strict order; the last holds the topics not named
	of     map[string]*lane // by topic; absent: the last lane
}

// newStrictQueues returns queues in the order of topics, then one lane
// for every topic not named.
func newStrictQueues(topics []string) *topicQueues {
	q := &topicQueues{strict: true, of: make(map[string]*lane, len(topics))}
	for _, t := range topics {
		l := &lane{weight: 1}
		q.lanes = append(q.lanes, l)
		q.of[t] = l
	}
	q.lanes = append(q.lanes, &lane{weight: 1})
	return q
}

// newWeightedQueues returns a lane per topic, weighted by weights (1 when
// absent).
func newWeightedQueues(topics []string, weights map[string]int) *topicQueues {
	q := &topicQueues{of: make(map[string]*lane, len(topics))}
	for _, t := range slices.Sorted(slices.Values(topics)) {
		l := &lane{weight: max(1, weights[t])}
		q.lanes = append(q.lanes, l)
		q.of[t] = l
	}
	return q
}

// laneOf returns the lane of topic.
func (q *topicQueues) laneOf(topic string) *lane {
	if l := q.of[topic]; l != nil {
		return l
	}
	return q.lanes[len(q.lanes)-1] // strict: not named; weighted: cannot happen (every handled topic has a lane)
}

func (q *topicQueues) push(j *xjob) { q.laneOf(j.job.Topic).push(j) }

// pushFront puts js, oldest first, ahead of the jobs in their lanes.
func (q *topicQueues) pushFront(js []*xjob) {
	by := map[*lane][]*xjob{}
	for _, j := range js {
		l := q.laneOf(j.job.Topic)
		by[l] = append(by[l], j)
	}
	for l, ljs := range by {
		l.pushFront(ljs)
	}
}

// pop takes the next job to start off its lane; nil: none queued.
func (q *topicQueues) pop() *xjob {
	if q.strict {
		for _, l := range q.lanes {
			if j := l.pop(); j != nil {
				return j
			}
		}
		return nil
	}
	var best *lane
	total := 0
	for _, l := range q.lanes {
		if !l.live() {
			l.current = 0 // an empty lane saves no share for later
			continue
		}
		l.current += l.weight
		total += l.weight
		if best == nil || l.current > best.current {
			best = l
		}
	}
	if best == nil {
		return nil
	}
	best.current -= total
	return best.pop()
}

// each calls f for every job in the lanes, dropped ones included.
func (q *topicQueues) each(f func(*xjob)) {
	for _, l := range q.lanes {
		for _, j := range l.all() {
			f(j)
		}
	}
}

func (q *topicQueues) reset() {
	for _, l := range q.lanes {
		l.reset()
		l.current = 0
	}
}
