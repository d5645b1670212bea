package console

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console/jobinfo"
	"github.com/shareq/shareq/control"
	"github.com/shareq/shareq/internal/fleet"
)

// Defaults of the options.
const (
	// ReplayRateDefault is the default of [ReplayRate], in jobs per
	// second: the default of "shareq dlq replay -rate".
	ReplayRateDefault = 100
	// PageSizeDefault is the default of [PageSize].
	PageSizeDefault = 50
	// PayloadLimitDefault is the default of [PayloadLimit], in bytes.
	PayloadLimitDefault = 64 << 10
	// ScanLimitDefault is the default of [ScanLimit], in records.
	ScanLimitDefault = jobinfo.ScanLimitDefault
)

// An Option configures [New], which validates them all at once.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; New validates it once (validate).
type config struct {
	client        *kgo.Client
	clientSet     bool
	clientOpts    []kgo.Opt
	clientOptsSet bool
	prefix        string
	prefixSet     bool
	actions       bool
	rate          float64
	pageSize      int
	payload       int
	scan          int
	outbox        OutboxDB
	outboxSet     bool
	logger        *slog.Logger
	loggerSet     bool
	workersTopic  string
	controlTopic  string
	auth          authConfig // auth.go
	sampler       *Sampler   // charts.go
	samplerSet    bool
}

// Client makes the console talk to Kafka through cl, the application's
// own client: it describes groups and topics through it, and reads and
// replays DLQ topics through short-lived clients made from cl's options
// (cl.Opts()), one per request, so requests never share a read. cl must
// consume nothing (no ConsumeTopics, no group), as for [dlq.List]; the
// console does not close it. Give Client or [ClientOpts], not both.
func Client(cl *kgo.Client) Option {
	return optionFunc(func(c *config) { c.client, c.clientSet = cl, true })
}

// ClientOpts makes the console connect to Kafka with opts (seed brokers,
// TLS, SASL): each request makes its own client and closes it when done.
func ClientOpts(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) {
		c.clientOpts, c.clientOptsSet = append(c.clientOpts, opts...), true
	})
}

// Prefix is the path the console is served under, such as "/console",
// when the handler is mounted there without stripping it (the default is
// "/": the handler serves the root). Links and forms carry the prefix.
func Prefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix, c.prefixSet = p, true })
}

// Actions enables the actions: replaying parked jobs, enqueueing a job
// and resetting a group's start offsets. Without it the console is
// read-only: it shows no forms and refuses every POST.
//
// Without [Authenticate] or [BasicAuth], the actions are served to
// loopback clients only: a request from another address, or one that
// carries a proxy's forwarding header (Forwarded, X-Forwarded-For,
// X-Real-IP; the console trusts none of them), sees no forms and is
// refused with 403. Behind a proxy, give Authenticate (or
// [ActionsWithoutAuthOnNetwork], which names its risk). Every action is
// logged at Info, one line: who (the user, or "anonymous (loopback)"),
// what, and the outcome.
func Actions() Option {
	return optionFunc(func(c *config) { c.actions = true })
}

// ReplayRate caps the jobs per second a replay started from the console
// re-produces; 0 means no cap. Default [ReplayRateDefault].
func ReplayRate(perSecond float64) Option {
	return optionFunc(func(c *config) { c.rate = perSecond })
}

// PageSize is how many parked jobs a DLQ page shows, 1 to 1000. Default
// [PageSizeDefault].
func PageSize(n int) Option {
	return optionFunc(func(c *config) { c.pageSize = n })
}

// PayloadLimit caps the bytes of a payload the job page shows. Default
// [PayloadLimitDefault].
func PayloadLimit(n int) Option {
	return optionFunc(func(c *config) { c.payload = n })
}

// ScanLimit caps the records of each DLQ partition one page of a
// filtered DLQ list reads looking for matches; a page that reaches it
// shows the matches found and links to the next, older, stretch. It also
// caps the records of each DLQ topic the job page (/jobs/ID) reads,
// newest first, looking for the job (jobinfo.FindParked); the page says
// of a topic it stopped short in that its older records were not
// searched. Default [ScanLimitDefault].
func ScanLimit(n int) Option {
	return optionFunc(func(c *config) { c.scan = n })
}

// Outbox adds the outbox page, read from db (a *pgxpool.Pool fits), and
// gives the job page (/jobs/ID) the outbox, the produced jobs, the claims
// and the job log to read.
func Outbox(db OutboxDB) Option {
	return optionFunc(func(c *config) { c.outbox, c.outboxSet = db, true })
}

// WorkersTopic names the status topic the Workers page reads (default
// worker.StatusTopicDefault, "shareq.workers"): the one the workers
// publish to (worker.StatusTopic).
func WorkersTopic(name string) Option {
	return optionFunc(func(c *config) { c.workersTopic = name })
}

// ControlTopic names the control topic the group pages read pauses from
// and write them to (default control.DefaultTopic, "shareq.controls"):
// the one the workers follow (worker.ControlTopic).
func ControlTopic(name string) Option {
	return optionFunc(func(c *config) { c.controlTopic = name })
}

// Logger receives the errors the pages show, and a line per action.
// Default slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger, c.loggerSet = l, true })
}

// newConfig applies opts over the defaults and validates the result: the
// error lists every option that is wrong, each prefixed "console: ".
func newConfig(opts []Option) (*config, error) {
	c := &config{rate: ReplayRateDefault, pageSize: PageSizeDefault, payload: PayloadLimitDefault, scan: ScanLimitDefault, workersTopic: fleet.TopicDefault, controlTopic: control.DefaultTopic}
	var errs []error
	for i, o := range opts {
		if o == nil {
			errs = append(errs, fmt.Errorf("nil Option (option %d): remove it or give an option", i))
			continue
		}
		o.apply(c)
	}
	errs = append(errs, c.validate()...)
	if len(errs) > 0 {
		for i, e := range errs {
			errs[i] = fmt.Errorf("console: %w", e)
		}
		return nil, errors.Join(errs...)
	}
	c.prefix = strings.TrimRight(c.prefix, "/")
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// validate returns what is wrong with c, each saying what to give.
func (c *config) validate() []error {
	var errs []error
	switch {
	case c.clientSet && c.client == nil:
		errs = append(errs, errors.New("Client(nil): give the *kgo.Client the console talks through, or use ClientOpts"))
	case c.clientOptsSet && len(c.clientOpts) == 0:
		errs = append(errs, errors.New("ClientOpts without options: give at least kgo.SeedBrokers"))
	case !c.clientSet && !c.clientOptsSet:
		errs = append(errs, errors.New("no Kafka: give Client or ClientOpts"))
	case c.clientSet && c.clientOptsSet:
		errs = append(errs, errors.New("Client and ClientOpts: give Client or ClientOpts, not both"))
	}
	if c.prefixSet && (!strings.HasPrefix(c.prefix, "/") || strings.ContainsAny(c.prefix, "?#\"'<> ")) {
		errs = append(errs, fmt.Errorf("Prefix(%q): want a path starting with /, such as \"/console\"", c.prefix))
	}
	if c.rate < 0 || math.IsNaN(c.rate) || math.IsInf(c.rate, 0) {
		errs = append(errs, fmt.Errorf("ReplayRate(%v): want 0 (no cap) or a positive number", c.rate))
	}
	if c.pageSize < 1 || c.pageSize > 1000 {
		errs = append(errs, fmt.Errorf("PageSize(%d): want 1 to 1000", c.pageSize))
	}
	if c.payload < 1 {
		errs = append(errs, fmt.Errorf("PayloadLimit(%d): want at least 1", c.payload))
	}
	if c.scan < 1 {
		errs = append(errs, fmt.Errorf("ScanLimit(%d): want at least 1", c.scan))
	}
	if c.outboxSet && c.outbox == nil {
		errs = append(errs, errors.New("Outbox(nil): give the database of the outbox (a *pgxpool.Pool), or leave Outbox out"))
	}
	if c.workersTopic == "" {
		errs = append(errs, errors.New("WorkersTopic(\"\"): give the workers' status topic, or leave WorkersTopic out for \""+fleet.TopicDefault+"\""))
	}
	if c.controlTopic == "" {
		errs = append(errs, errors.New("ControlTopic(\"\"): give the control topic, or leave ControlTopic out for \""+control.DefaultTopic+"\""))
	}
	if c.loggerSet && c.logger == nil {
		errs = append(errs, errors.New("Logger(nil): give a *slog.Logger, or leave Logger out for slog.Default()"))
	}
	errs = append(errs, c.validateCharts()...)
	return append(errs, c.auth.validate(c.actions)...)
}
