package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/sourcegraph/conc"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/control"
)

// The control topic (package control): the operator's pauses, followed by
// one goroutine that Run owns (controlWatch.run). Its first read is
// taken before the member starts (a worker started while paused starts
// paused); each later change of the worker's pauses goes to the
// executor's loop (executorConfig.Pauses). It touches no executor state
// itself.

// controlConfig is what ControlTopic sets.
type controlConfig struct {
	topic    string
	topicSet bool
}

// ControlTopic names the compacted topic the worker follows for the
// operator's pauses and limits (default control.DefaultTopic,
// "shareq.controls"; the one "shareq pause", "shareq limit" and the
// console write); "" turns both off. The worker reads it to its end
// before its first fetch (a worker started while its group or one of its
// topics is paused starts paused, and with the limits set), then follows
// it: a pause stops the fetching and starting of the topic's jobs within
// a fetch round trip, and jobs in hand wait, spending no delivery
// ([Worker.PausedTopics]; docs/operating.md, "Pause and resume"); a
// limit replaces the code's (docs/operating.md, "Limits changed at run
// time"). The
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
	// controlFirstRead bounds the wait for the first read before the
	// member starts: a broker that does not answer delays the start no
	// longer.
	controlFirstRead = 15 * time.Second
)

// controlWatch follows the control topic for one run of the worker. Only
// its goroutine (run) touches it after followControl started it.
type controlWatch struct {
	w       *Worker
	c       *control.Client
	log     *slog.Logger
	brokers string // for the create hint
	// first takes the first read to the start (followControl), until
	// gaveUp closes; nil once it was sent.
	first  chan control.State
	gaveUp chan struct{}
	// failing says a failure was logged and the recovery not yet.
	failing bool
}

// followControl starts the control watch in helpers, until wctx ends,
// and returns the control topic's state for the member's start: the
// watch's first read, or none when that failed (logged) or did not come
// within controlFirstRead; each later change goes to the executor's
// loop. cl is a client that consumes nothing; the watch reads through a
// client of its own made from cl's options (control.New).
func (w *Worker) followControl(ctx, wctx context.Context, helpers *conc.WaitGroup, cl *kgo.Client, log *slog.Logger) control.State {
	if w.cfg.control.topic == "" {
		return control.State{}
	}
	c, err := control.New(cl, control.Topic(w.cfg.control.topic))
	if err != nil {
		log.Warn("pause control cannot reach this worker: no client for the control topic; the worker runs unpaused", "control_topic", w.cfg.control.topic, "error", err)
		return control.State{}
	}
	brokers := strings.Join(w.seeds(cl), ",")
	if brokers == "" {
		brokers = w.bootstrap()
	}
	cw := &controlWatch{w: w, c: c, log: log, brokers: brokers, first: make(chan control.State), gaveUp: make(chan struct{})}
	helpers.Go(func() { cw.run(wctx) })
	timer := time.NewTimer(controlFirstRead)
	defer timer.Stop()
	select {
	case st := <-cw.first:
		return st
	case <-timer.C:
		log.Warn("the control topic was not read within "+controlFirstRead.String()+": the worker starts unpaused and applies the pauses in force once it reads them", "control_topic", c.Topic())
	case <-ctx.Done():
	}
	close(cw.gaveUp)
	return control.State{}
}

// run follows the control topic until ctx ends, handing each state read
// on (deliver); a failed read is retried, with the state last read kept
// meanwhile, and a missing topic created.
func (cw *controlWatch) run(ctx context.Context) {
	wait := controlRetry
	justCreated := false
	for {
		err := cw.c.Watch(ctx, func(st control.State) {
			if cw.failing {
				cw.failing = false
				cw.log.Info("the control topic is readable again; pauses reach this worker", "control_topic", cw.c.Topic())
			}
			wait = controlRetry
			cw.deliver(ctx, st, true)
		})
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, control.ErrNoTopic) && justCreated:
			// Created a moment ago, not in the metadata yet: look again
			// after a wait, quietly.
			err = nil
		case errors.Is(err, control.ErrNoTopic):
			// Missing (or deleted since): a new topic holds no pause,
			// and is watched at once.
			if err = cw.c.EnsureTopic(ctx); err == nil {
				cw.log.Info("the control topic was missing and is created now; pauses written to it reach this worker", "control_topic", cw.c.Topic())
				wait, justCreated = controlRetry, true
				cw.deliver(ctx, control.State{}, true)
				continue
			}
		}
		justCreated = false
		if err != nil {
			if !cw.failing {
				cw.failed(err)
			}
			cw.deliver(ctx, control.State{}, false) // the start waits no longer; the executor keeps what it has
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

// deliver hands st on: to the start while it waits for the first read,
// else to the executor's loop. A state that is not fresh (none was read:
// a failure) only lets the start go unpaused.
func (cw *controlWatch) deliver(ctx context.Context, st control.State, fresh bool) {
	if cw.first != nil {
		select {
		case cw.first <- st:
			cw.first = nil
			return
		case <-cw.gaveUp:
			cw.first = nil
		case <-ctx.Done():
			return
		}
	}
	if !fresh {
		return
	}
	select {
	case cw.w.controls <- st:
	case <-ctx.Done():
	}
}
