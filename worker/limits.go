package worker

import (
	"fmt"
	"time"

	"github.com/shareq/shareq/handler"
)

// Keys limits the jobs of one topic by a key taken from each job — a
// webhook's host, a customer ID, an email provider account — so that one
// slow or broken destination never takes the worker's handler slots or
// spends other jobs' deliveries. Give it to [KeyLimit].
//
// A job whose key is at its limit waits in the worker without a handler
// slot: its lock is renewed, it spends no delivery, and jobs of other
// keys run past it. A job that waits until [MaxHold] is snoozed (see
// [handler.Snooze]): copied for later and accepted, never released into a
// spent delivery.
//
// The limits are per worker: with three workers in the group and
// Concurrency 2, up to six jobs of one key run at once in the fleet.
// The worker's memory and metrics grow with the keys of the jobs it
// holds, never with the keys there are.
type Keys struct {
	// Key returns the job's key; "" puts the job under no key limit.
	// Required. It runs on the worker's loop for every job of the topic:
	// keep it cheap (a header, the record key, a field of the payload
	// parsed once).
	Key func(job *handler.Job) string
	// Concurrency is how many jobs of one key run at once in this
	// worker; 0: no limit.
	Concurrency int
	// Rate jobs of one key start per Per in this worker, evenly spaced
	// (a job every Per/Rate, with a burst of one); 0: no limit.
	Rate int
	Per  time.Duration
	// BreakAfter opens a key's breaker after this many retryable
	// failures of its jobs in a row, besides every
	// [handler.KeyUnavailable]; 0: only handler.KeyUnavailable opens it.
	// While a key's breaker is open its jobs wait (no slot, no delivery
	// spent); one of them probes the key every few seconds (1 s, doubling
	// up to 30 s), and the first probe that does not fail closes it.
	BreakAfter int
}

// KeyLimit limits topic's jobs by the key k.Key takes from each job: at
// most k.Concurrency of one key at once, k.Rate per k.Per, and a breaker
// per key that [handler.KeyUnavailable] (or k.BreakAfter failures in a
// row) opens. The topic must be registered with [Handle]; one KeyLimit
// per topic.
//
//	worker.KeyLimit("webhooks", worker.Keys{
//		Key:         worker.HeaderKey("host"),
//		Concurrency: 2,
//	})
func KeyLimit(topic string, k Keys) Option {
	return optionFunc(func(c *config) { c.keyLimits = append(c.keyLimits, topicKeys{topic: topic, k: k}) })
}

// HeaderKey returns a [Keys.Key] function that takes the key from the
// job's header name (absent: no key limit).
func HeaderKey(name string) func(job *handler.Job) string {
	return func(job *handler.Job) string {
		v, _ := job.Header(name)
		return string(v)
	}
}

// RecordKey is a [Keys.Key] function that takes the record's key.
func RecordKey(job *handler.Job) string { return string(job.Key) }

type topicKeys struct {
	topic string
	k     Keys
}

// checkKeyLimits validates the KeyLimit options against the handled topics.
func (c *config) checkKeyLimits(handled map[string]bool, bad func(format string, args ...any)) {
	limited := map[string]bool{}
	for _, tk := range c.keyLimits {
		opt, k := fmt.Sprintf("KeyLimit(%q)", tk.topic), tk.k
		switch {
		case !handled[tk.topic]:
			bad("%s: no handler for the topic; register it with worker.Handle first", opt)
		case limited[tk.topic]:
			bad("%s: the topic's key limit is set twice; give one Keys with every limit", opt)
		}
		limited[tk.topic] = true
		if k.Key == nil {
			bad("%s: Keys.Key is nil; say where the key comes from, e.g. worker.HeaderKey(\"customer\") or worker.RecordKey", opt)
		}
		if k.Concurrency < 0 {
			bad("%s: Keys.Concurrency(%d) must not be negative (0: no limit)", opt, k.Concurrency)
		}
		switch {
		case k.Rate < 0:
			bad("%s: Keys.Rate(%d) must not be negative (0: no limit)", opt, k.Rate)
		case k.Rate > 0 && k.Per <= 0:
			bad("%s: Keys.Rate(%d) needs Keys.Per, the interval: e.g. Per: time.Second", opt, k.Rate)
		case k.Rate == 0 && k.Per != 0:
			bad("%s: Keys.Per(%v) without Keys.Rate: set Rate, the jobs per Per", opt, k.Per)
		case k.Rate > 0 && k.Per/time.Duration(k.Rate) < time.Microsecond:
			bad("%s: Keys.Rate(%d) per %v is more than a job a microsecond per key", opt, k.Rate, k.Per)
		}
		if k.BreakAfter < 0 {
			bad("%s: Keys.BreakAfter(%d) must not be negative (0: only handler.KeyUnavailable opens the breaker)", opt, k.BreakAfter)
		}
	}
}

// keyLimits returns the key limit of each topic that has one.
func (c *config) keyLimitsByTopic() map[string]*keyLimit {
	if len(c.keyLimits) == 0 {
		return nil
	}
	m := make(map[string]*keyLimit, len(c.keyLimits))
	for _, tk := range c.keyLimits {
		k := tk.k
		l := &keyLimit{topic: tk.topic, key: k.Key, conc: k.Concurrency, breakAfter: k.BreakAfter}
		if k.Rate > 0 {
			l.every = k.Per / time.Duration(k.Rate)
		}
		l.baseConc, l.baseEvery = l.conc, l.every
		m[tk.topic] = l
	}
	return m
}

// keyLimit is one topic's Keys as the executor applies them.
type keyLimit struct {
	topic      string
	key        func(job *handler.Job) string
	conc       int           // 0: no limit
	every      time.Duration // one start per every; 0: no rate
	breakAfter int
	// What the code declares; conc and every may be set at run time
	// (applyLimits).
	baseConc  int
	baseEvery time.Duration
}

// keyOf returns the key of job under l, recovering from a panic in the
// user's Key function (the job then has no key: it runs unlimited, and
// its handler meets the same payload).
func (l *keyLimit) keyOf(job *handler.Job) (k string, err error) {
	defer func() {
		if r := recover(); r != nil {
			k, err = "", fmt.Errorf("worker: KeyLimit(%q): Keys.Key panicked: %v", l.topic, r)
		}
	}()
	return l.key(job), nil
}
