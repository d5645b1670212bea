// Package worker runs shareq job handlers on a Kafka share group.
//
// A [Worker] is one member of its share group. It speaks the share
// protocol itself (franz-go is the transport): it holds many records at
// once, across any number of share fetches, and acknowledges each one when
// its job ends, in any order, so a slow job holds only its own handler
// slot. It fetches as handlers free up: up to [Concurrency] records, plus
// a small prefetch that covers one fetch round trip at the observed job
// rate (bounded so that no record waits long against its lock; one that
// waits all the same, behind jobs that turned slow, has its lock renewed),
// and a fetch returns as soon as the broker has records. One goroutine owns the
// member's state (its share session per broker, the records held, the
// acknowledgements and renewals to send); handlers run on goroutines of
// their own and hand their outcomes back to it: ACCEPT on success, REJECT
// on a permanent failure, RELEASE otherwise, after a retry backoff (see
// the handler package for the full table).
//
// Each delivery ends with an [Outcome] (succeeded, parked, retried,
// discarded, interrupted), reported to observers in [Result] beside the
// acknowledgement, logged (Debug; Warn for a parked job, Error for a
// discarded one) and counted in the "worker stopped" line. A job parked by
// the dlq middleware is ACCEPTed but is never a success.
//
// A job that runs close to the end of its lock has the lock renewed (Kafka
// 4.2+), up to [MaxHold]. A job may also have a timeout ([JobTimeout],
// [TopicJobTimeout]): its context is cancelled then, and it is retried. When Run's context is cancelled the worker stops
// fetching, runs what the fetch in flight brings, lets running handlers
// finish for up to [ShutdownTimeout] and acknowledges them, and only once
// no fetch of its own is in flight releases the jobs it held in retry
// backoff; at the deadline it cancels and releases the rest. It then
// closes its share sessions, releasing whatever it still holds at once,
// and leaves the group. The order matters on a job's last delivery: a
// release there makes the broker archive the record, so no record is
// released where a fetch of the same worker could take it and never run
// it.
//
// A worker that dies without leaving (SIGKILL, an OOM kill) keeps its
// partitions until the group's coordinator fences it, after the group's
// share session timeout: the worker asks for [SessionTimeoutDefault]
// ([SessionTimeout]), which brokers with lowered minimums allow; a default
// broker allows no less than 45 s, and the worker logs that at start.
// Likewise it asks the coordinator to assign the group's partitions at
// most every [AssignmentIntervalDefault] ([AssignmentInterval]) rather
// than Kafka's 1 s, so that a worker on a new group gets its partitions
// about 0.1 s after it joins rather than 1 s.
//
// While it runs, a worker publishes its status (what it runs, its jobs,
// open breakers, dependencies down) to a compacted topic ([StatusTopic],
// default [StatusTopicDefault]) every [StatusEvery] and on a change, and
// a tombstone when it stops: "shareq workers" and the console list the
// workers from it. A missing or unwritable status topic is logged once
// and never stops the worker.
//
// A worker follows the operator's pauses ("shareq pause", package
// control) in a compacted control topic ([ControlTopic]): a paused topic
// of its group is fetched no more and its jobs in hand wait, spending no
// delivery, until the resume ([Worker.PausedTopics]).
//
// Delivery is at least once: see the handler package for what that means
// for a handler.
package worker

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/middleware"
)

// Errors the worker returns from Run or records as a [Result.Err].
var (
	// ErrBrokersUnreachable: Run could not reach any seed broker, or the
	// brokers stopped answering during its start-up checks (their
	// connections failed, or StartTimeout passed).
	ErrBrokersUnreachable = errors.New("worker: cannot reach the brokers")
	// ErrShareGroupsUnsupported: the brokers lack the share group APIs
	// (KIP-932); Apache Kafka 4.2 or newer is needed.
	ErrShareGroupsUnsupported = errors.New("worker: the brokers do not support share groups (KIP-932); use Apache Kafka 4.2 or newer with share.version=1")
	// ErrTopicMissing: a topic with a registered handler does not exist.
	ErrTopicMissing = errors.New("worker: topic does not exist")
	// ErrGroupNotShare: the group name belongs to a group of another type
	// (a consumer group); a share group needs a name of its own.
	ErrGroupNotShare = errors.New("worker: the group is not a share group")
	// ErrNotAuthorized: the brokers refused the worker a right it needs
	// (an ACL is missing). The error names the right and the
	// kafka-acls.sh command that grants it; docs/security.md lists them.
	ErrNotAuthorized = errors.New("worker: not authorized")
	// ErrAlreadyRan: Run was called twice on one Worker.
	ErrAlreadyRan = errors.New("worker: Run called twice; make a new Worker")

	// ErrLockExpired: the record's lock had run out before its job could
	// start (its renewals while it waited for a slot failed); it is
	// released without running. On its last delivery the job
	// runs all the same (a release would make the broker archive it
	// unhandled).
	ErrLockExpired = errors.New("worker: lock expired before the job started")
	// ErrLockLost: the record's lock ran out while the job was in hand (a
	// renewal failed past the deadline, or the share session holding it
	// was lost with its broker connection); its context is cancelled, and
	// another member may run it. Also the error of a job whose handler
	// returned after its lock ran out with no renewal answered (the
	// process was frozen: a SIGSTOP, a long GC or VM pause), or after the
	// group's coordinator may have dropped the worker (it was fenced since
	// the job started, or no heartbeat of its was answered for longer than
	// the [SessionTimeout] it set: a freeze past the session but within
	// the lock, after which the broker gives the worker's records to
	// others at once): its ACCEPT or REJECT is still sent, but the job is
	// reported interrupted, not done, since the broker has most likely
	// given the record out again.
	ErrLockLost = errors.New("worker: lock lost while the job ran")
	// ErrMaxHold: the job held its record for MaxHold; its context is
	// cancelled and the record released.
	ErrMaxHold = errors.New("worker: job held its lock for MaxHold")
	// ErrJobTimeout: the job ran for its JobTimeout (or TopicJobTimeout);
	// its context is cancelled with this cause, and an error it returns
	// then is retried (the Result's Err wraps ErrJobTimeout).
	ErrJobTimeout = errors.New("worker: job timed out")
	// ErrShutdown: the worker stopped and the job did not finish within
	// the shutdown timeout; its context is cancelled and the record
	// released.
	ErrShutdown = errors.New("worker: shut down before the job finished")
)

// Worker runs handlers for the jobs of a share group. Make one with [New]
// and start it with [Worker.Run].
type Worker struct {
	cfg      *config
	handlers map[string]handler.Handler
	timeouts map[string]time.Duration // job timeout per topic; absent or 0: none
	topics   []string
	checkers []ConcurrencyChecker // the handlers' layers that have a concurrency to check at start
	ran      atomic.Bool
	checked  atomic.Bool
	topicIDs map[string]kadm.TopicID // set by Check, read by Run
	// topicParts is each handled topic's partition count and brokerLine
	// the brokers' release line, both set by Check and read by the topic
	// watch in Run.
	topicParts map[string]int
	brokerLine brokerLine
	groupReset string // the group's share.auto.offset.reset as Check left it ("" when unknown)

	// assignEvery is the group's share.assignment.interval.ms as Check
	// left it (0 when unknown), for the member's first heartbeats.
	assignEvery time.Duration

	deliveryLimit atomic.Int32           // set by Check
	brokerDLQ     atomic.Pointer[string] // set by Check

	down atomic.Pointer[[]string] // the dependencies down while the executor is paused; written by it
	// controls brings the control topic's state to the executor's loop
	// (controls.go); paused is the pauses the executor applied.
	controls chan control.State
	paused   atomic.Pointer[[]TopicPause]

	stopped chan struct{}         // closed when Run returns
	runErr  atomic.Pointer[error] // what Run returned, set before stopped closes
}

// New validates opts and returns a Worker. Every invalid option is
// reported, each naming the option.
func New(opts ...Option) (*Worker, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, stopped: make(chan struct{}), controls: make(chan control.State)}
	w.handlers, w.timeouts, w.topics, w.checkers = cfg.handlers()
	return w, nil
}

// handlers returns the handler of each topic, with its middleware and the
// worker's recovery closest to it, each topic's job timeout, the topics
// in the order they were registered, and the handlers and middleware
// layers among them that are [ConcurrencyChecker]s.
func (c *config) handlers() (map[string]handler.Handler, map[string]time.Duration, []string, []ConcurrencyChecker) {
	hs, timeouts := make(map[string]handler.Handler), make(map[string]time.Duration)
	var topics []string
	var checkers []ConcurrencyChecker
	visit := func(h handler.Handler) handler.Handler {
		if cc, ok := h.(ConcurrencyChecker); ok {
			checkers = append(checkers, cc)
		}
		return h
	}
	for _, r := range c.routes {
		mws := append(append([]handler.Middleware{}, c.use...), r.mws...)
		h := middleware.Recover()(visit(r.h))
		for i := len(mws) - 1; i >= 0; i-- { // handler.Chain, each layer visited
			h = visit(mws[i](h))
		}
		hs[r.topic] = h
		topics = append(topics, r.topic)
		timeouts[r.topic] = c.jobTimeout
	}
	for _, tt := range c.topicTimeouts {
		timeouts[tt.topic] = tt.d
	}
	return hs, timeouts, topics, checkers
}

// Stopped returns a channel that is closed when [Worker.Run] has returned:
// the worker has stopped for good, gracefully or not ([Worker.Err] says
// which), and has left its group. A program that runs the worker in the
// background watches it to notice a worker that failed, for a health
// check or to shut down; it is never closed if Run is never called. Safe
// for concurrent use.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Err says why the worker stopped: nil while it runs (or before Run), and
// after a graceful stop (Run's context cancelled); else the error Run
// returned, such as a failed start-up check ([ErrTopicMissing],
// [ErrBrokersUnreachable], ...) or a share-group member that failed. Safe
// for concurrent use.
func (w *Worker) Err() error {
	if p := w.runErr.Load(); p != nil {
		return *p
	}
	return nil
}

// DependenciesDown returns the dependencies whose outage paused the
// worker (a handler returned [handler.Unavailable] for them), in the order
// they went down, or nil while the worker is not paused. While paused the
// worker holds its jobs on their deliveries and fetches nothing; it
// resumes by itself when a probe gets through. A readiness check can
// report it; a liveness check should not fail on it (a restart would
// release the held jobs, costing each a delivery, and gain nothing). Safe
// for concurrent use.
func (w *Worker) DependenciesDown() []string {
	if p := w.down.Load(); p != nil {
		return append([]string(nil), (*p)...)
	}
	return nil
}

// PausedTopics returns the worker's topics an operator paused, as the
// worker applied them, by topic name; nil when none is. While a topic is
// paused the worker fetches none of its records and starts none of its
// jobs (docs/operations.md, "Pause and resume"). Safe for concurrent use.
func (w *Worker) PausedTopics() []TopicPause {
	if p := w.paused.Load(); p != nil {
		return append([]TopicPause(nil), (*p)...)
	}
	return nil
}

// Topics returns the topics the worker has handlers for.
func (w *Worker) Topics() []string { return append([]string(nil), w.topics...) }

// Group returns the share group the worker joins.
func (w *Worker) Group() string { return w.cfg.group }

func (w *Worker) baseOpts() []kgo.Opt {
	// A client ID per process, so shareq status and the broker's logs
	// tell workers apart; kgo.ClientID in ClientOpts comes later and wins.
	opts := []kgo.Opt{kgo.ClientID(defaultClientID())}
	if len(w.cfg.brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(w.cfg.brokers...))
	}
	return append(opts, w.cfg.clientOpts...)
}

// defaultClientID is "shareq-<host>-<pid>".
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("shareq-%s-%d", host, os.Getpid())
}
