package worker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
)

// The control topic (package control): the operator's pauses, read to its
// end before the member's first fetch and followed by one goroutine that
// Run owns (controlWatch.run), which hands each change of the worker's
// pauses to the executor's loop (executorConfig.Pauses) and touches no
// executor state itself.

// controlConfig is what ControlTopic sets.
type controlConfig struct {
	topic    string
	topicSet bool
}

// ControlTopic names the compacted topic the worker follows for the
// operator's pauses (default control.DefaultTopic, "shareq.controls"; the
// one "shareq pause" and the console write); "" turns pause control off.
// The worker reads it to its end before its first fetch (a worker started
// while its group or one of its topics is paused starts paused), then
// follows it: a pause stops the fetching and starting of the topic's jobs
// within a fetch round trip, and jobs in hand wait, spending no delivery
// ([Worker.PausedTopics]; docs/operating.md, "Pause and resume"). The
// worker creates the topic when it is missing; when it may not (no
// Create right) or cannot read it (Describe and Read), it logs one Warn
// saying what to create or grant and runs unpaused, looking again now and
// then. A worker that loses the topic while running (a broker outage)
// keeps the pauses it last read.
func ControlTopic(name string) Option {
	return optionFunc(func(c *config) { c.control.topic, c.control.topicSet = name, true })
}

func (c *config) checkControl(bad func(format string, args ...any)) {
	if !c.control.topicSet {
		c.control.topic = control.DefaultTopic
	}
	if c.control.topic != "" {
		if why := badTopic(c.control.topic); why != "" {
			bad("ControlTopic(%q): %s", c.control.topic, why)
		}
	}
}

const (
	// controlRetry is how soon a control watch that failed tries again,
	// doubling up to controlRetryMax while it keeps failing.
	controlRetry    = time.Second
	controlRetryMax = time.Minute
	// controlFirstRead bounds the read before the member's first fetch:
	// a broker that does not answer delays the start no longer.
	controlFirstRead = 15 * time.Second
)

// controlWatch follows the control topic for one run of the worker.
type controlWatch struct {
	w   *Worker
	c   *control.Client
	log *slog.Logger
	// last is the pauses last handed to the executor (or read first);
	// failing says a failure was logged and its recovery is not yet.
	last    map[string]TopicPause
	failing bool
	brokers string // for the create hint
}

// newControlWatch returns the worker's control watch, or nil when
// ControlTopic is "" or its client cannot be made (logged).
func (w *Worker) newControlWatch(log *slog.Logger) (*controlWatch, func()) {
	if w.cfg.control.topic == "" {
		return nil, func() {}
	}
	cl, err := kgo.NewClient(w.baseOpts()...)
	if err == nil {
		var c *control.Client
		if c, err = control.New(cl, control.Topic(w.cfg.control.topic)); err == nil {
			brokers := strings.Join(w.seeds(cl), ",")
			if brokers == "" {
				brokers = w.bootstrap()
			}
			return &controlWatch{w: w, c: c, log: log, brokers: brokers}, cl.Close
		}
		cl.Close()
	}
	log.Warn("pause control cannot reach this worker: no client for the control topic; the worker runs unpaused", "control_topic", w.cfg.control.topic, "error", err)
	return nil, func() {}
}

// first reads the pauses in force before the member fetches, creating
// the topic when it is missing. Failing, it logs one Warn and returns
// none: the worker starts unpaused, and run looks again.
func (cw *controlWatch) first(ctx context.Context) map[string]TopicPause {
	ctx, cancel := context.WithTimeout(ctx, controlFirstRead)
	defer cancel()
	st, err := cw.c.Read(ctx)
	if errors.Is(err, control.ErrNoTopic) {
		if err = cw.c.EnsureTopic(ctx); err == nil {
			cw.log.Info("the control topic was missing and is created now; pauses written to it reach this worker", "control_topic", cw.c.Topic())
			return nil
		}
	}
	if err != nil {
		cw.failed(err)
		return nil
	}
	cw.last = cw.pausesOf(st)
	return cw.last
}

// run follows the control topic until ctx ends, handing each change of
// the worker's pauses to the executor's loop; a failed read is retried
// with the pauses last read kept meanwhile.
func (cw *controlWatch) run(ctx context.Context) {
	wait := controlRetry
	for {
		err := cw.c.Watch(ctx, func(st control.State) {
			if cw.failing {
				cw.failing = false
				cw.log.Info("the control topic is readable again; pauses reach this worker", "control_topic", cw.c.Topic())
			}
			wait = controlRetry
			cw.apply(ctx, cw.pausesOf(st))
		})
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, control.ErrNoTopic) {
			err = cw.c.EnsureTopic(ctx) // deleted since, or first created moments ago
		}
		if err != nil && !cw.failing {
			cw.failed(err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, controlRetryMax)
	}
}

// failed logs the one Warn of a failure to read the control topic. The
// control client's error says what failed (a missing topic, a missing
// right with the kafka-acls.sh line, a broker not answering); the fix
// covers the first two.
func (cw *controlWatch) failed(err error) {
	cw.failing = true
	cw.log.Warn("pause control cannot reach this worker: it cannot read the control topic, and runs unpaused (or as last read) until it can",
		"control_topic", cw.c.Topic(), "error", err,
		"fix", "create the topic with: shareq topics create -controls"+cw.topicFlag()+" -brokers "+cw.brokers+
			"; grant this worker's principal Describe and Read on it (docs/security.md); the worker looks again now and then")
}

func (cw *controlWatch) topicFlag() string {
	if cw.c.Topic() == control.DefaultTopic {
		return ""
	}
	return " -controls-topic " + cw.c.Topic()
}

// apply hands ps to the executor's loop unless the worker's pauses did
// not change.
func (cw *controlWatch) apply(ctx context.Context, ps map[string]TopicPause) {
	if cw.last != nil && maps.EqualFunc(ps, cw.last, func(a, b TopicPause) bool { return a.Reason == b.Reason && a.By == b.By }) {
		return
	}
	select {
	case cw.w.pauses <- ps:
		cw.last = ps
	case <-ctx.Done():
	}
}

// pausesOf returns the pauses of st that stop the worker's topics: each
// topic's own, or its group's.
func (cw *controlWatch) pausesOf(st control.State) map[string]TopicPause {
	ps := map[string]TopicPause{}
	for _, t := range cw.w.topics {
		if p, ok := st.Paused(cw.w.cfg.group, t); ok {
			ps[t] = TopicPause{Topic: t, Reason: p.Reason, By: p.By}
		}
	}
	return ps
}
