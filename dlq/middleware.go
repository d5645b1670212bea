package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/acl"
	"github.com/shareq/shareq/internal/jobctx"
	"github.com/shareq/shareq/internal/safehandle"
)

// Defaults for the options of [Middleware].
const (
	// TopicSuffix is appended to a job's topic to name its DLQ topic when
	// neither [Topic] nor [TopicFunc] is given: jobs of "emails" are
	// parked in "emails.dlq".
	TopicSuffix = ".dlq"
	// ProduceTimeoutDefault bounds how long parking one job may take,
	// including the producer's retries.
	ProduceTimeoutDefault = 10 * time.Second
	// MaxErrorLengthDefault is the most bytes of error text kept in
	// [HeaderError].
	MaxErrorLengthDefault = 4 << 10
	// MaxStackLengthDefault is the most bytes of a panic stack kept in
	// [HeaderStack].
	MaxStackLengthDefault = 16 << 10
	// TrackFirstAttemptsDefault is how many failing jobs a middleware
	// remembers the first attempt of.
	TrackFirstAttemptsDefault = 10000
)

// Producer writes records and waits for the broker to acknowledge them.
// *kgo.Client implements it; tests can fake it. ProduceSync must be safe
// for concurrent use.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

var _ Producer = (*kgo.Client)(nil)

// An Option configures [Middleware].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	topic          string
	topicSet       bool
	topicFn        func(*handler.Job) string
	topicFnSet     bool
	produceTimeout time.Duration
	maxErrorLen    int
	maxStackLen    int
	redact         func(error) string
	onPark         []func(*handler.Job, string)
	logger         *slog.Logger
	trackFirst     int

	now      func() time.Time // tests only
	hostname string

	errs []error
}

// Topic parks every job in the named topic. Default: the job's topic plus
// [TopicSuffix]. The topic must exist: producing to a missing topic fails,
// and the job is released instead of parked (on its last delivery, the
// broker then archives it). Name it in the worker's
// worker.RequireTopics option, so the worker refuses to start without it.
func Topic(name string) Option {
	return optionFunc(func(c *config) { c.topic, c.topicSet = name, true })
}

// TopicFunc chooses the DLQ topic per job; it cannot be combined with
// [Topic]. A job for which fn returns "" is not parked (it is released, as
// when the produce fails). fn must be safe for concurrent use.
func TopicFunc(fn func(job *handler.Job) string) Option {
	return optionFunc(func(c *config) { c.topicFn, c.topicFnSet = fn, true })
}

// ProduceTimeout bounds how long parking one job may take. Parking does
// not stop when the handler's context is cancelled (a worker that is
// shutting down still parks the job it just failed), but it stops after
// d. Default [ProduceTimeoutDefault].
func ProduceTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.produceTimeout = d })
}

// MaxErrorLength sets how many bytes of error text [HeaderError] keeps.
// Longer text is cut and marked "…[truncated]". Default
// [MaxErrorLengthDefault].
func MaxErrorLength(n int) Option {
	return optionFunc(func(c *config) { c.maxErrorLen = n })
}

// MaxStackLength sets how many bytes of a panic stack [HeaderStack] keeps
// (the top of the stack, where the panic happened). Default
// [MaxStackLengthDefault].
func MaxStackLength(n int) Option {
	return optionFunc(func(c *config) { c.maxStackLen = n })
}

// Redact rewrites a handler's error before its text goes into
// [HeaderError]. The error text of every parked job is stored in the DLQ
// topic, readable by whoever can read that topic, for as long as its
// retention lasts: if errors can carry secrets (a URL with a token, a
// connection string, a customer's data), remove them here. fn must be
// safe for concurrent use. The panic stack is not passed through fn.
func Redact(fn func(err error) string) Option {
	return optionFunc(func(c *config) { c.redact = fn })
}

// OnPark adds functions called after each job is parked (the DLQ produce
// acknowledged), with the reason recorded, in the order given. It may be
// given several times: every hook is called (metrics.Metrics.Parked beside
// one of the application's own). The worker reports a parked job as
// worker.OutcomeParked without any hook. Hooks run on the handler's
// goroutine, so they must be quick and safe for concurrent use.
func OnPark(fns ...func(job *handler.Job, reason string)) Option {
	return optionFunc(func(c *config) {
		for i, fn := range fns {
			if fn == nil {
				c.errs = append(c.errs, fmt.Errorf("OnPark: function %d is nil", i))
				continue
			}
			c.onPark = append(c.onPark, fn)
		}
	})
}

// Logger sets the logger for parked jobs (Warn) and failed parks (Error).
// Default: the logger the job's context carries (handler.Logger: the
// worker's own, worker.Logger), else slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// TrackFirstAttempts sets how many failing jobs the middleware remembers
// the first failing attempt of, to fill in [HeaderFirstAttemptAt]. The
// oldest entry is forgotten when the table is full; an entry is dropped
// when its job succeeds or is parked. 0 turns tracking off. Default
// [TrackFirstAttemptsDefault] (about 1 MB at most).
func TrackFirstAttempts(n int) Option {
	return optionFunc(func(c *config) { c.trackFirst = n })
}

// Middleware returns a [handler.Middleware] that parks failed jobs in a
// dead-letter (DLQ) topic instead of letting the broker archive them:
//
//	handler result                              middleware returns
//	nil                                         nil (ACCEPT)
//	permanent error (handler.IsPermanent)       park, then a *handler.ParkedError (ACCEPT, outcome parked)
//	a panic in what it wraps                    park with the stack, then a *handler.ParkedError
//	other error on the last delivery            park, then a *handler.ParkedError
//	other error before the last delivery        the error, unchanged (RELEASE)
//	handler.Unavailable (a dependency is down)  the error, unchanged, on any delivery (the worker pauses)
//	handler.Snooze (run again later)            the error, unchanged, on any delivery (the worker snoozes the job)
//	handler.KeyUnavailable (its key is down)    the error, unchanged, on any delivery where the topic has a key
//	                                            limit (the key's breaker holds the job); else as any other error
//	a *handler.CancelledError (never ran)       the error, unchanged (ACCEPT, outcome cancelled)
//	park failed (produce error or timeout)      handler.Retry("dlq-produce", err) (RELEASE)
//
// A parked job is not a success: the middleware returns a
// [*handler.ParkedError] that says where the job was parked and why
// (its Unwrap gives the failure), and the worker reports the job as
// worker.OutcomeParked (in its Result, its observers, its log and
// shareq_jobs_total{outcome="parked"}) while it ACCEPTs the record.
// Middleware outside this one sees that error ([handler.ParkedOf]) and
// must pass it on.
//
// Parking produces one record to the DLQ topic with the job's key, value
// and headers (including [handler.JobIDHeader], so a replayed job keeps
// its identity) followed by the envelope headers (see the Header
// constants), and waits for the broker to acknowledge it. A job is never
// accepted unless its DLQ record was acknowledged.
//
// A job too large for the DLQ topic with its envelope (the produce fails
// with MESSAGE_TOO_LARGE: the DLQ topic's max.message.bytes, or the
// producer's ProducerBatchMaxBytes) is parked without its value, marked
// with [HeaderValueOmitted] and logged at Warn level; [Replay] reads the
// value back from the source record, so keep the source topic's retention
// longer than the time a job may wait in the DLQ.
//
// A park that fails on the job's last delivery leaves a gap: the worker
// RELEASEs the job, and the broker, whose delivery limit is reached,
// archives it without delivering it again. The job then exists only in
// the source topic's log. The middleware logs this at Error level with
// the job's location; alert on it, and keep the DLQ topic available.
//
// The last delivery is [handler.Job.LastDelivery]: the worker fills in
// the job's DeliveryLimit from the group's limit, less
// worker.SpareDeliveries; with DeliveryLimit 0 (unknown: a job not from a
// worker) only permanent failures are parked. Parking is at least once: if the worker dies
// after the park but before its ACCEPT reaches the broker, the job is
// delivered again and may be parked twice, both copies with the same job
// ID.
//
// Place Middleware outside the idempotency middleware (earlier in
// [handler.Chain]), so that what fails in the claim itself is parked too.
// (Inside it works as well: the claim middleware rolls its claim back on
// the ParkedError, so a replay of the job runs.) A panic in the handler
// or in middleware inside this one is
// recovered here and parked with its stack ([HeaderStack]); a panic in
// middleware outside it cannot reach it, and the worker rejects that job
// (the worker's Result.Err keeps the panic's stack).
//
// p is usually the worker's or the application's *kgo.Client; it must not
// be nil. The returned middleware is safe for concurrent use.
func Middleware(p Producer, opts ...Option) (handler.Middleware, error) {
	c := &config{
		produceTimeout: ProduceTimeoutDefault,
		maxErrorLen:    MaxErrorLengthDefault,
		maxStackLen:    MaxStackLengthDefault,
		trackFirst:     TrackFirstAttemptsDefault,
		now:            time.Now,
	}
	var errs []error
	for _, o := range opts {
		if o == nil {
			errs = append(errs, errors.New("nil option"))
			continue
		}
		o.apply(c)
	}
	errs = append(errs, c.errs...)
	if p == nil {
		errs = append(errs, errors.New("producer is nil; pass the *kgo.Client to produce with"))
	}
	switch {
	case c.topicSet && c.topicFnSet:
		errs = append(errs, errors.New("Topic and TopicFunc: give one, not both"))
	case c.topicFnSet && c.topicFn == nil:
		errs = append(errs, errors.New("TopicFunc: function is nil"))
	case c.topicSet && strings.TrimSpace(c.topic) == "":
		errs = append(errs, errors.New(`Topic(""): topic name is empty`))
	case c.topicSet && strings.TrimSpace(c.topic) != c.topic:
		errs = append(errs, fmt.Errorf("Topic(%q): topic name has surrounding spaces", c.topic))
	}
	if c.produceTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ProduceTimeout(%v): must be positive", c.produceTimeout))
	}
	if c.maxErrorLen < 64 {
		errs = append(errs, fmt.Errorf("MaxErrorLength(%d): must be at least 64", c.maxErrorLen))
	}
	if c.maxStackLen < 64 {
		errs = append(errs, fmt.Errorf("MaxStackLength(%d): must be at least 64", c.maxStackLen))
	}
	if c.trackFirst < 0 {
		errs = append(errs, fmt.Errorf("TrackFirstAttempts(%d): must not be negative", c.trackFirst))
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("dlq: %w", e)
		}
		return nil, errors.Join(errs...)
	}
	if c.hostname == "" {
		c.hostname = hostname()
	}
	pk := &parker{cfg: c, p: p, first: newFirstSeen(c.trackFirst)}
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			return pk.handle(ctx, next, job)
		})
	}, nil
}

// hostname returns the host name for HeaderWorkerHost.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// withClock replaces time.Now, for tests.
func withClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

type parker struct {
	cfg   *config
	p     Producer
	first *firstSeen
}

func (pk *parker) handle(ctx context.Context, next handler.Handler, job *handler.Job) error {
	start := pk.cfg.now()
	// A panic in next becomes a permanent failure that keeps the panic's
	// value and stack, so the job is parked with them (the worker's own
	// recovery wraps only the handler, not the middleware between it and
	// this one).
	err := safehandle.Handle(jobctx.WithParker(ctx, job.LastDelivery()), next, job)
	if err == nil {
		pk.first.forget(job.ID())
		return nil
	}
	if _, parked := handler.ParkedOf(err); parked || handler.IsCancelled(err) {
		return err // done with inside: parked by another, or never run
	}
	reason, park := pk.classify(ctx, job, err)
	if !park {
		pk.first.remember(job.ID(), start)
		return err
	}
	return pk.park(ctx, job, err, reason, start)
}

// classify returns the reason to park job with and whether to park it.
func (pk *parker) classify(ctx context.Context, job *handler.Job, err error) (string, bool) {
	var perm *handler.PermanentError
	if errors.As(err, &perm) {
		if perm.Reason == "" {
			return handler.ReasonPermanent, true
		}
		return perm.Reason, true
	}
	if jobctx.Held(ctx, err) {
		// A dependency or the job's destination is down, or the job
		// snoozed: the worker holds the job on this delivery (or
		// copies it for later), so it is not parked even on its last
		// one.
		return "", false
	}
	if job.LastDelivery() {
		return handler.ReasonDeliveryLimit, true
	}
	return "", false
}

func (pk *parker) park(ctx context.Context, job *handler.Job, herr error, reason string, start time.Time) error {
	id := job.ID()
	ended := pk.cfg.now()
	topic := pk.cfg.topic
	switch {
	case pk.cfg.topicFn != nil:
		topic = pk.cfg.topicFn(job)
	case topic == "":
		topic = job.Topic + TopicSuffix
	}
	last := job.LastDelivery()
	if topic == "" {
		perr := errors.New("dlq: TopicFunc returned no topic for the job")
		pk.logFailure(ctx, job, id, topic, reason, last, perr)
		return handler.Retry("dlq-produce", perr)
	}

	var errText string
	if pk.cfg.redact != nil {
		errText = pk.cfg.redact(herr)
	} else {
		errText = herr.Error()
	}
	var stack string
	var pe *handler.PanicError
	if errors.As(herr, &pe) && len(pe.Stack) > 0 {
		stack = truncate(string(pe.Stack), pk.cfg.maxStackLen)
	}
	first, ok := pk.first.lookup(id)
	switch {
	case job.DeliveryCount <= 1:
		first = start // this attempt was the first
	case !ok:
		first = job.Timestamp // lower bound
	}
	env := Envelope{
		Reason:          reason,
		Error:           truncate(errText, pk.cfg.maxErrorLen),
		Stack:           stack,
		DeliveryCount:   job.DeliveryCount,
		SourceTopic:     job.Topic,
		SourcePartition: job.Partition,
		SourceOffset:    job.Offset,
		Group:           job.Group,
		EnqueuedAt:      job.Timestamp,
		FirstAttemptAt:  first,
		LastAttemptAt:   ended,
		WorkerHost:      pk.cfg.hostname,
		ParkedAt:        pk.cfg.now(),
	}
	hs := make([]kgo.RecordHeader, 0, len(job.Headers)+15)
	for _, h := range job.Headers {
		if strings.HasPrefix(h.Key, HeaderPrefix) {
			continue // a stale envelope must not shadow the new one
		}
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	rec := &kgo.Record{Topic: topic, Key: job.Key, Value: job.Value, Headers: append(hs, env.headers()...)}

	// The handler's ctx may already be cancelled (shutdown, maximum hold);
	// the park must still complete, within its own bound.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pk.cfg.produceTimeout)
	defer cancel()
	produce := func(rec *kgo.Record) (kgo.ProduceResults, error) {
		res := pk.p.ProduceSync(pctx, rec)
		perr := res.FirstErr()
		if perr == nil && len(res) == 0 {
			perr = errors.New("producer returned no result")
		}
		return res, perr
	}
	res, perr := produce(rec)
	if errors.Is(perr, kerr.MessageTooLarge) && len(job.Value) > 0 {
		// The job fit its own topic but not the DLQ topic with the
		// envelope (or not the producer's batch limit): park it without
		// its value, which stays in the source record.
		env.ValueOmitted, env.OmittedValueSize = true, len(job.Value)
		stub := &kgo.Record{Topic: topic, Key: job.Key, Headers: append(hs[:len(hs):len(hs)], env.headers()...)}
		pk.log(ctx).LogAttrs(ctx, slog.LevelWarn, "dlq: the job is too large for the DLQ topic; parking it without its value, which stays in the source record",
			append(jobAttrs(job, id, reason, topic), slog.Int("value_bytes", len(job.Value)), slog.String("error", perr.Error()))...)
		res, perr = produce(stub)
	}
	if perr != nil && acl.Denied(perr) {
		var bootstrap string
		if cl, ok := pk.p.(*kgo.Client); ok {
			if seeds, ok := cl.OptValue(kgo.SeedBrokers).([]string); ok && len(seeds) > 0 {
				bootstrap = seeds[0]
			}
		}
		perr = fmt.Errorf("%w: %s", perr, acl.Missing(acl.Right{Op: "Write", Resource: acl.Topic, Name: topic}, bootstrap, nil))
	}
	if perr != nil {
		pk.logFailure(ctx, job, id, topic, reason, last, perr)
		return handler.Retry("dlq-produce", fmt.Errorf("dlq: park job %s in %s: %w", id, topic, perr))
	}
	pk.first.forget(id)
	at := res[0].Record
	// In a worker, the worker logs the parked job (one line, at Warn, with
	// its outcome): this line is for Debug. Outside one, nobody else does.
	level := slog.LevelWarn
	if jobctx.InWorker(ctx) {
		level = slog.LevelDebug
	}
	pk.log(ctx).LogAttrs(ctx, level, "dlq: parked job",
		append(jobAttrs(job, id, reason, topic), slog.Int("dlq_partition", int(at.Partition)), slog.Int64("dlq_offset", at.Offset))...)
	for _, fn := range pk.cfg.onPark {
		fn(job, reason)
	}
	return handler.Parked(handler.DeadLetter{Topic: at.Topic, Partition: at.Partition, Offset: at.Offset, Reason: reason, Err: herr})
}

// log returns the logger of Logger, else the one ctx carries.
func (pk *parker) log(ctx context.Context) *slog.Logger {
	if pk.cfg.logger != nil {
		return pk.cfg.logger
	}
	return handler.Logger(ctx)
}

func (pk *parker) logFailure(ctx context.Context, job *handler.Job, id, topic, reason string, last bool, err error) {
	msg := "dlq: could not park job; releasing it for another delivery"
	if last {
		msg = "dlq: could not park job on its LAST delivery; releasing it, and the broker will ARCHIVE it: the job is no longer queued and exists only in its topic's log"
	}
	pk.log(ctx).LogAttrs(context.WithoutCancel(ctx), slog.LevelError, msg,
		append(jobAttrs(job, id, reason, topic), slog.Bool("last_delivery", last), slog.String("error", err.Error()))...)
}

// jobAttrs are the log attributes that say which job is parked where.
func jobAttrs(job *handler.Job, id, reason, dlqTopic string) []slog.Attr {
	return []slog.Attr{
		slog.String("job_id", id),
		slog.String("reason", reason),
		slog.String("topic", job.Topic),
		slog.Int("partition", int(job.Partition)),
		slog.Int64("offset", job.Offset),
		slog.Int("delivery_count", int(job.DeliveryCount)),
		slog.String("dlq_topic", dlqTopic),
	}
}
