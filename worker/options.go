package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// Defaults for the options of [New].
const (
	// ConcurrencyDefault is how many handlers run at once when
	// [Concurrency] is not given.
	ConcurrencyDefault = 10
	// ShutdownTimeoutDefault is how long a stopping worker lets running
	// handlers finish before cancelling them.
	ShutdownTimeoutDefault = 30 * time.Second
	// MaxHoldDefault is how long a job may keep its lock through renewals.
	MaxHoldDefault = 30 * time.Minute
	// FetchMaxWaitDefault is how long a broker may hold a share fetch
	// that has no records for the worker yet. A broker serves one request
	// of a connection at a time, so an acknowledgement sent while such a
	// fetch waits is applied when it returns: at most this late.
	FetchMaxWaitDefault = 100 * time.Millisecond
	// StartTimeoutDefault bounds the start-up checks of [Worker.Run].
	StartTimeoutDefault = 30 * time.Second
	// RetryBackoffBaseDefault and RetryBackoffMaxDefault shape the default
	// retry backoff: base × 2^(delivery-1) with ±20% jitter, at most max.
	RetryBackoffBaseDefault = time.Second
	RetryBackoffMaxDefault  = time.Minute
	// SessionTimeoutDefault is the share session timeout the worker asks
	// of its group when [SessionTimeout] is not given: a worker killed
	// without leaving has its partitions moved to the others within
	// about 8 s (this, plus the heartbeat interval of a sixth of it,
	// plus the group's assignment interval of 1 s).
	SessionTimeoutDefault = 6 * time.Second
	// MaxBytesInHandDefault bounds the bytes of the records a worker holds
	// when [MaxBytesInHand] is not given: 64 MiB, with the member's
	// decoded-batch cache of half as much, 96 MiB of records at most; Go's
	// collector lets the heap grow to about twice what is live (GOGC=100),
	// which leaves a worker in a 512 MiB container room for its handlers.
	// Records of 1 KiB fill it only at 65,536 in hand, far above the count
	// Concurrency and the prefetch allow, so it binds only for large
	// records.
	MaxBytesInHandDefault = 64 << 20
)

// Kafka's absolute limits on the group configs the options set: no broker
// setting allows more.
const (
	// maxGroupDeliveryLimit is the largest group.share.max.delivery.count.limit.
	maxGroupDeliveryLimit = 25
	// kafkaDeliveryLimitMax is group.share.max.delivery.count.limit's
	// default: a broker that does not report its bound allows this.
	kafkaDeliveryLimitMax = 10
	// maxTopicName is the longest topic name Kafka accepts.
	maxTopicName = 249
)

// An Option configures a [Worker]. Options are applied in order by [New],
// which validates the result once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type route struct {
	topic string
	h     handler.Handler
	mws   []handler.Middleware
}

type topicTimeout struct {
	topic string
	d     time.Duration
}

type config struct {
	brokers         []string
	clientOpts      []kgo.Opt
	group           string
	routes          []route
	use             []handler.Middleware
	concurrency     int
	shutdownTimeout time.Duration
	startTimeout    time.Duration
	logger          *slog.Logger
	offsetReset     string
	renewMargin     time.Duration
	maxHold         time.Duration
	groupLimit      int // DeliveryLimit
	spareDeliveries int
	fetchMaxWait    time.Duration
	maxBytesInHand  int64
	observers       []Observer
	observer        Observer // all of observers, or nil
	retryBackoff    func(delivery int32) time.Duration
	retryBackoffSet bool
	required        []string
	brokerDLQ       string
	brokerDLQSet    bool
	sessionTimeout  time.Duration
	sessionSet      bool // SessionTimeout was given
	nilHandler      bool // a Handle had a nil handler
	jobTimeout      time.Duration
	topicTimeouts   []topicTimeout
	keyLimits       []topicKeys
	weights         []topicWeight // Priority (priority.go)
	strict          []string      // StrictPriority's topics, in order
	strictCalls     int           // StrictPriority options given
	snoozer         Snoozer
	status          statusConfig  // StatusTopic, StatusEvery (status.go)
	control         controlConfig // ControlTopic (controls.go)
	assign          assignConfig  // AssignmentInterval (assign.go)
	rates           []topicRate   // TopicRate (rate.go)
	rateRefresh     time.Duration // how often a rate-limited worker counts the members sharing it (rate.go)
	// The stall check's (stall.go): how long a partition gives nothing
	// before it looks, and how often it looks. Tests shorten them
	// (export_test.go).
	stallAfter, stallEvery time.Duration
	healStalls             bool // HealStalls (heal.go)
	// The heal's waits (heal.go): for the members to hold nothing, for
	// the start offset to move. Tests shorten them (export_test.go).
	healQuiet, healVerdict time.Duration
	healStale              time.Duration // a heal's pause older than this lost its healer (heal.go)

	errs []error
}

// Brokers sets the seed brokers, as host:port. Either Brokers or a
// kgo.SeedBrokers option in [ClientOpts] is required.
func Brokers(addrs ...string) Option {
	return optionFunc(func(c *config) { c.brokers = append(c.brokers, addrs...) })
}

// ClientOpts adds franz-go client options to the clients the worker makes
// (the share-group member's, and one for start-up checks and the topic
// watch): TLS (kgo.DialTLSConfig), SASL
// (kgo.SASL), a logger, hooks such as kprom, a client ID (kgo.ClientID;
// default "shareq-<host>-<pid>", so shareq status names each process).
// Consumer and group options (kgo.ConsumerOpt, kgo.GroupOpt: ConsumeTopics,
// ConsumerGroup, ShareGroup, ShareAckCallback, FetchMaxBytes, ...) are
// rejected: the worker is its own share-group member, and franz-go would
// start a consumer of its own beside it on the same client.
func ClientOpts(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) {
		for i, o := range opts {
			switch o.(type) {
			case nil:
				c.errs = append(c.errs, fmt.Errorf("ClientOpts: option %d is nil", i))
			case kgo.GroupOpt:
				c.errs = append(c.errs, fmt.Errorf("ClientOpts: option %d is a franz-go group option; the worker is its own share-group member: name the group with worker.Group", i))
			case kgo.ConsumerOpt:
				c.errs = append(c.errs, fmt.Errorf("ClientOpts: option %d is a franz-go consumer option; the worker fetches itself: name topics with worker.Handle, bound fetch waits with worker.FetchMaxWait", i))
			default:
				c.clientOpts = append(c.clientOpts, o)
			}
		}
	})
}

// Group sets the share group the worker joins, as one member. Required;
// it must not contain ':' (a share group whose name has one consumes
// nothing on brokers without the fix of KAFKA-20183, such as 4.2.0).
func Group(name string) Option {
	return optionFunc(func(c *config) { c.group = name })
}

// Handle registers h for the jobs of topic, wrapped in mws (the first
// listed outermost) inside any middleware given with [Use]. At least one
// Handle is required; a topic may be registered once.
func Handle(topic string, h handler.Handler, mws ...handler.Middleware) Option {
	return optionFunc(func(c *config) {
		if h == nil {
			c.errs = append(c.errs, fmt.Errorf("Handle(%q): handler is nil", topic))
			c.nilHandler = true
			return
		}
		c.routes = append(c.routes, route{topic: topic, h: h, mws: mws})
	})
}

// RequireTopics names topics the worker does not consume but needs, such
// as the DLQ topics its dlq middleware parks jobs in: Run (and Check)
// refuse to start while one is missing, as they do for a handled topic,
// or while the worker's principal may not write it ([ErrNotAuthorized]:
// the dlq middleware's producer is usually the same principal).
// Without it a missing DLQ topic shows only when the first job is parked
// (unless the cluster creates topics on produce): the park fails and, on
// a job's last delivery, the broker archives the job.
func RequireTopics(topics ...string) Option {
	return optionFunc(func(c *config) { c.required = append(c.required, topics...) })
}

// Use adds middleware applied to the handlers of every topic, outside each
// topic's own middleware. The first listed is the outermost.
func Use(mws ...handler.Middleware) Option {
	return optionFunc(func(c *config) { c.use = append(c.use, mws...) })
}

// Concurrency sets how many handlers may run at once: the worker's one
// knob. The worker holds up to this many records plus a prefetch that
// follows the observed job rate: the jobs of four fetch round trips at
// that rate (at least 10 ms of them), so short jobs get up to 4,096
// records in hand beyond Concurrency and long jobs one or two; never so
// many that a record would wait more than a quarter of its lock for a
// handler at that rate. When jobs suddenly take longer, a record that
// waits for a handler about half its lock has its lock renewed while it
// waits, so no delivery is spent on a job that never ran. It fetches as
// handlers free up. A slow job holds only its own slot. The worker is one share-group member
// whatever the Concurrency (Kafka allows 200 members per group by
// default, group.share.max.size). Default [ConcurrencyDefault].
func Concurrency(n int) Option {
	return optionFunc(func(c *config) { c.concurrency = n })
}

// ShutdownTimeout sets how long a stopping worker lets running handlers
// finish. Handlers still running then have their context cancelled and
// their records released. Default [ShutdownTimeoutDefault].
func ShutdownTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.shutdownTimeout = d })
}

// StartTimeout bounds the start-up checks in Run (brokers reachable,
// topics present, group configuration). Default [StartTimeoutDefault].
func StartTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.startTimeout = d })
}

// Logger sets the logger. Default slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// AutoOffsetReset sets the group config share.auto.offset.reset before any
// worker joins: "earliest" makes a new group start at the oldest record of
// each partition, "latest" (Kafka's default) at the next record produced.
// It matters only for a group that has not consumed yet. Default: leave the
// group's setting alone. Without it, a worker of a group at "latest" logs
// one Info line at its start when the partitions it has not started hold
// records: how many, which will not run, and how to run them.
func AutoOffsetReset(where string) Option {
	return optionFunc(func(c *config) { c.offsetReset = where })
}

// RenewMargin sets how long before its lock runs out a running job's lock
// is renewed. Default: half the lock duration.
func RenewMargin(d time.Duration) Option {
	return optionFunc(func(c *config) { c.renewMargin = d })
}

// MaxHold sets how long one delivery of a job may keep renewing its lock,
// counted from the job's start (for a record that waited long for a slot,
// or for a paused worker, from when the worker began renewing it while it
// waited). At
// MaxHold the handler's context is cancelled and the record released.
// Default [MaxHoldDefault].
func MaxHold(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxHold = d })
}

// DeliveryLimit sets how many deliveries a job gets: the group config
// share.delivery.count.limit, written before the worker joins, after
// which the broker archives a record that was never accepted. It is the
// group's, so every worker of the group should give the same n (the last
// to start wins). Apache Kafka allows 2 to 10 by default
// (group.share.min/max.delivery.count.limit; no broker allows more than
// 25): Run checks n against the brokers' bounds, and where they do not
// report them (kfake, shareq dev), against the defaults, so a limit a
// default broker would refuse fails on a development broker too. Kafka
// 4.2 has no such group config: there, set the broker config
// group.share.delivery.count.limit instead.
//
// Default: leave the group's setting alone; Run then reads the group
// config, else the broker's, else uses Kafka's default of 5. Jobs see
// the limit in [handler.Job.DeliveryLimit], less [SpareDeliveries].
func DeliveryLimit(n int) Option {
	return optionFunc(func(c *config) { c.groupLimit = n })
}

// SpareDeliveries leaves k deliveries between the one jobs treat as their
// last ([handler.Job.DeliveryLimit] and [handler.Job.LastDelivery]: the
// dlq middleware parks a failing job on it) and the group's limit, on
// which the broker archives the record. A worker killed during a job's
// last delivery (SIGKILL, OOM, a lost node) cannot park it: with no
// delivery left the broker archives the job unrecorded (or writes it to
// the broker's dead-letter topic, Kafka 4.4+); with spares it is
// delivered again and parked then. RELIABILITY.md recommends 5:
//
//	worker.DeliveryLimit(10),   // the broker archives after 10 deliveries
//	worker.SpareDeliveries(5),  // jobs (and the dlq middleware) treat the 5th as the last
//
// Default 0: the last delivery is the group's. k must leave at least one
// delivery: Run fails when the group's limit is k or less.
func SpareDeliveries(k int) Option {
	return optionFunc(func(c *config) { c.spareDeliveries = k })
}

// SessionTimeout sets how long the group's coordinator keeps a member
// that stopped heartbeating: the group configs share.session.timeout.ms,
// to d, and share.heartbeat.interval.ms, to a sixth of d, set at start.
// A worker that dies without leaving (SIGKILL, an OOM kill, a lost node)
// keeps its partitions that long: the records it held come back at once
// (its connections close), but no other member fetches from its
// partitions until the coordinator fences it and they learn of it at
// their next heartbeat, so its partitions move after about d + d/6 plus
// the group's assignment interval (share.assignment.interval.ms, 1 s).
//
// The price of a short session: a worker that cannot heartbeat for d (a
// long stop-the-world pause, a network blip, a starved host) is fenced
// too. Its partitions move to the others, it rejoins, and the records
// whose locks run out meanwhile are delivered again.
//
// Apache Kafka bounds both configs by broker configs:
// group.share.min/max.session.timeout.ms (45 s to 60 s by default) and
// group.share.min/max.heartbeat.interval.ms (5 s to 15 s), so a default
// broker allows no session shorter than 45 s. Where the bounds refuse d,
// the worker sets the nearest values they allow and starts, logging one
// Warn line with the failover time it got and the broker settings that
// allow d.
//
// Default [SessionTimeoutDefault], set only when it is shorter than the
// group's session timeout and the group has none of its own (an
// operator's choice wins); a worker that may not alter the group's configs
// then logs that at Warn and starts. Given explicitly, d is set whatever
// the group had, and a missing ALTER_CONFIGS right fails Run with
// [ErrNotAuthorized]. SessionTimeout(0) leaves the group's settings alone.
// d must be whole milliseconds, from 1 s to 1 h.
func SessionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionTimeout, c.sessionSet = d, true })
}

// RetryBackoff sets how long a job that failed with a retryable error is
// held before its record is released for the next delivery, given the
// delivery count of the failed attempt. Share groups redeliver a released
// record at once, so without a backoff a job whose dependency is down
// (a database restart, an API outage) uses up its delivery limit in
// moments and is archived. While held, the record keeps its lock (renewed
// as needed) and its handler slot is free for other jobs. No
// backoff is applied on the last delivery, at shutdown, or past MaxHold.
//
// Default: 1 s × 2^(delivery-1) with ±20% jitter, at most 1 minute (1 s,
// 2 s, 4 s, 8 s before deliveries 2 to 5). RetryBackoff(nil) releases at
// once. A handler that knows better (a 429's Retry-After) returns
// handler.RetryAfter(d, err): the job is held d instead, with or without a
// RetryBackoff, within the same limits.
func RetryBackoff(f func(delivery int32) time.Duration) Option {
	return optionFunc(func(c *config) { c.retryBackoff = f; c.retryBackoffSet = true })
}

// ExponentialBackoff returns base × 2^(delivery-1) with ±20% jitter, at
// most max: a backoff function for [RetryBackoff].
func ExponentialBackoff(base, max time.Duration) func(delivery int32) time.Duration {
	return func(delivery int32) time.Duration {
		d := base
		for i := int32(1); i < delivery && d < max; i++ {
			d *= 2
		}
		d += time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
		return min(d, max)
	}
}

// JobTimeout sets how long a job may run: at d after its handler started,
// the job's context is cancelled with cause [ErrJobTimeout], as River's
// per-job Timeout does. A handler that then returns an error (its
// context's, usually) is retried: its error is wrapped in a
// handler.RetryError with reason "timeout" that wraps ErrJobTimeout, the
// job is held for the retry backoff and released for another delivery
// (outcome retried). A permanent error stays permanent; a handler that
// returns nil succeeded. On the job's last delivery the retry is a
// release the broker archives (outcome discarded), unless a dlq
// middleware parks it: the middleware sees the handler's context error on
// the last delivery and parks the job with reason delivery-limit.
//
// The worker does not abandon a handler that ignores its cancelled
// context; [MaxHold] still ends it. d must be below MaxHold. It applies to
// every topic without a [TopicJobTimeout]. 0, the default, means no job
// timeout: a job runs until it returns or reaches MaxHold.
func JobTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.jobTimeout = d })
}

// TopicJobTimeout sets the job timeout of one topic's jobs, in place of
// [JobTimeout]: see there for what a timeout does. topic must be
// registered with [Handle]. 0 means no timeout for that topic, whatever
// JobTimeout says.
func TopicJobTimeout(topic string, d time.Duration) Option {
	return optionFunc(func(c *config) { c.topicTimeouts = append(c.topicTimeouts, topicTimeout{topic, d}) })
}

// FetchMaxWait sets how long a broker may hold a share fetch that has no
// records. Default [FetchMaxWaitDefault].
func FetchMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.fetchMaxWait = d })
}

// MaxBytesInHand bounds the bytes of the records the worker holds: their
// keys, values and headers, from the fetch that brings them until their
// jobs end, whether waiting for a handler, running, or held for a retry
// backoff. Past it the worker fetches no new records (it still
// acknowledges, renews its locks and heartbeats) and each job that ends
// frees its record's bytes for the next fetch, as it frees its handler
// slot. A fetch asks for no more records than fit in the room left at
// their mean size so far, so it may bring one record beyond it: the
// worker holds at most this plus one record per broker it fetches from
// at once (where record sizes vary a lot, a fetch sized by small records
// may bring large ones: up to room ÷ mean size of them). A record
// larger than the whole bound still runs, alone: the worker fetches it
// when it holds nothing else. The share-group member keeps decoded record
// batches for later fetches too, at most half this again; so records
// take at most 1.5 × this of the worker's memory, plus what the handlers
// copy. Default [MaxBytesInHandDefault]. Lower it for large records in a
// small container; Concurrency bounds the count.
func MaxBytesInHand(n int64) Option {
	return optionFunc(func(c *config) { c.maxBytesInHand = n })
}

// Observers adds observers that receive the worker's events, in the
// order given; the metrics package provides one, shareqtest another. It
// may be given several times. Default: none.
func Observers(os ...Observer) Option {
	return optionFunc(func(c *config) {
		for _, o := range os {
			if o == nil {
				c.errs = append(c.errs, errors.New("Observers: observer is nil"))
				continue
			}
			c.observers = append(c.observers, o)
		}
	})
}

// badTopic says what Kafka refuses in a topic name, or "" (Kafka's
// org.apache.kafka.common.internals.Topic.validate).
func badTopic(name string) string {
	switch {
	case name == "." || name == "..":
		return "Kafka refuses \".\" and \"..\" as topic names"
	case len(name) > maxTopicName:
		return fmt.Sprintf("topic name is %d characters long; Kafka allows at most %d", len(name), maxTopicName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Sprintf("topic name contains %q; Kafka allows only ASCII letters, digits, '.', '_' and '-'", r)
		}
	}
	return ""
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		concurrency:     ConcurrencyDefault,
		shutdownTimeout: ShutdownTimeoutDefault,
		startTimeout:    StartTimeoutDefault,
		maxHold:         MaxHoldDefault,
		fetchMaxWait:    FetchMaxWaitDefault,
		sessionTimeout:  SessionTimeoutDefault,
		maxBytesInHand:  MaxBytesInHandDefault,
		stallAfter:      stallAfterDefault,
		stallEvery:      topicWatchEvery,
		healQuiet:       healQuietWait,
		healVerdict:     healVerdictWait,
		healStale:       healStaleAfter,
		rateRefresh:     rateRefreshDefault,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		o.apply(c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	switch len(c.observers) {
	case 0:
	case 1:
		c.observer = c.observers[0]
	default:
		c.observer = multiObserver(c.observers)
	}
	if !c.retryBackoffSet {
		c.retryBackoff = ExponentialBackoff(RetryBackoffBaseDefault, RetryBackoffMaxDefault)
	}
	errs := c.errs
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.brokers) == 0 && len(c.clientOpts) == 0 {
		bad("Brokers: no seed brokers; pass worker.Brokers(\"host:9092\") or kgo.SeedBrokers in worker.ClientOpts")
	}
	for _, b := range c.brokers {
		if strings.TrimSpace(b) == "" {
			bad("Brokers: empty broker address")
		}
	}
	if strings.TrimSpace(c.group) == "" {
		bad("Group: the share group name is required; pass worker.Group(\"my-jobs\")")
	} else if strings.Contains(c.group, ":") {
		bad("Group(%q): must not contain ':' (brokers without the fix of KAFKA-20183, such as Kafka 4.2.0, store a share group's state under group:topic:partition and cannot read it back: the group would consume nothing)", c.group)
	}
	if len(c.routes) == 0 && !c.nilHandler { // a nil handler has said so already
		bad("Handle: no handlers; register one with worker.Handle(topic, handler)")
	}
	seen := map[string]bool{}
	for _, r := range c.routes {
		if strings.TrimSpace(r.topic) == "" {
			bad("Handle: empty topic name")
		} else if why := badTopic(r.topic); why != "" {
			bad("Handle(%q): %s", r.topic, why)
		}
		if seen[r.topic] {
			bad("Handle(%q): topic registered twice", r.topic)
		}
		seen[r.topic] = true
		for i, m := range r.mws {
			if m == nil {
				bad("Handle(%q): middleware %d is nil", r.topic, i)
			}
		}
	}
	for i, m := range c.use {
		if m == nil {
			bad("Use: middleware %d is nil", i)
		}
	}
	for _, t := range c.required {
		if strings.TrimSpace(t) == "" {
			bad("RequireTopics: empty topic name")
		} else if why := badTopic(t); why != "" {
			bad("RequireTopics(%q): %s", t, why)
		}
	}
	if c.concurrency < 1 {
		bad("Concurrency(%d): must be at least 1", c.concurrency)
	}
	if c.shutdownTimeout < 0 {
		bad("ShutdownTimeout(%v): must not be negative", c.shutdownTimeout)
	}
	if c.startTimeout <= 0 {
		bad("StartTimeout(%v): must be positive", c.startTimeout)
	}
	switch c.offsetReset {
	case "", "earliest", "latest":
	default:
		bad("AutoOffsetReset(%q): must be \"earliest\" or \"latest\"", c.offsetReset)
	}
	if c.renewMargin < 0 {
		bad("RenewMargin(%v): must not be negative", c.renewMargin)
	}
	if c.maxHold <= 0 {
		bad("MaxHold(%v): must be positive", c.maxHold)
	}
	if c.spareDeliveries < 0 {
		bad("SpareDeliveries(%d): must not be negative", c.spareDeliveries)
	}
	if c.brokerDLQ != "" {
		if why := badTopic(c.brokerDLQ); why != "" {
			bad("BrokerDLQ(%q): %s", c.brokerDLQ, why)
		}
	}
	switch {
	case c.groupLimit < 0 || c.groupLimit == 1:
		bad("DeliveryLimit(%d): must be at least 2 (Kafka's minimum; 0 leaves the group's limit alone)", c.groupLimit)
	case c.groupLimit > maxGroupDeliveryLimit:
		bad("DeliveryLimit(%d): must be at most %d (no Kafka broker allows more: group.share.max.delivery.count.limit is at most %d, and %d by default)",
			c.groupLimit, maxGroupDeliveryLimit, maxGroupDeliveryLimit, kafkaDeliveryLimitMax)
	}
	switch d := c.sessionTimeout; {
	case d == 0:
	case d < time.Second || d > time.Hour:
		bad("SessionTimeout(%v): must be from 1s to 1h (0 leaves the group's session timeout alone)", d)
	case d%time.Millisecond != 0:
		bad("SessionTimeout(%v): must be whole milliseconds (Kafka's share.session.timeout.ms)", d)
	}
	if c.groupLimit >= 2 && c.spareDeliveries >= c.groupLimit {
		bad("SpareDeliveries(%d) leaves none of DeliveryLimit(%d) to run: set it at most %d",
			c.spareDeliveries, c.groupLimit, c.groupLimit-1)
	}
	timeoutOK := func(opt string, d time.Duration) {
		switch {
		case d < 0:
			bad("%s: must not be negative (0 means no job timeout)", opt)
		case d > 0 && c.maxHold > 0 && d >= c.maxHold:
			bad("%s is not below MaxHold(%v): MaxHold would end the job first; lower the timeout or raise MaxHold", opt, c.maxHold)
		}
	}
	timeoutOK(fmt.Sprintf("JobTimeout(%v)", c.jobTimeout), c.jobTimeout)
	timed := map[string]bool{}
	for _, tt := range c.topicTimeouts {
		opt := fmt.Sprintf("TopicJobTimeout(%q, %v)", tt.topic, tt.d)
		switch {
		case !seen[tt.topic]:
			bad("%s: no handler for the topic; register it with worker.Handle first", opt)
		case timed[tt.topic]:
			bad("%s: the topic's timeout is set twice", opt)
		default:
			timeoutOK(opt, tt.d)
		}
		timed[tt.topic] = true
	}
	c.checkBatches(bad)
	c.checkKeyLimits(seen, bad)
	c.checkPriorities(seen, bad)
	c.checkStatus(bad)
	c.checkControl(bad)
	c.checkHeal(bad)
	c.checkAssign(bad)
	errs = append(errs, c.checkRates(topicsOf(c.routes))...)
	if c.fetchMaxWait < 10*time.Millisecond || c.fetchMaxWait > time.Minute {
		bad("FetchMaxWait(%v): must be between 10ms (the client's minimum) and 1m", c.fetchMaxWait)
	}
	if c.maxBytesInHand < 1 {
		bad("MaxBytesInHand(%d): must be positive: the bytes of records the worker may hold at once (default %d, 64 MiB); a record larger than it still runs, alone, so a small bound is safe", c.maxBytesInHand, MaxBytesInHandDefault)
	}
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("worker: %w", e)
		}
		return nil, errors.Join(errs...)
	}
	return c, nil
}
