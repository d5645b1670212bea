package console

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
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
	ScanLimitDefault = 20000
)

// An Option configures [New].
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config is what the options set; New validates it once.
type config struct {
	client     *kgo.Client
	clientOpts []kgo.Opt
	prefix     string
	actions    bool
	rate       float64
	pageSize   int
	payload    int
	scan       int
	outbox     OutboxDB
	logger     *slog.Logger
}

// Client makes the console talk to Kafka through cl, the application's
// own client: it describes groups and topics through it, and reads and
// replays DLQ topics through short-lived clients made from cl's options
// (cl.Opts()), one per request, so requests never share a read. cl must
// consume nothing (no ConsumeTopics, no group), as for [dlq.List]; the
// console does not close it. Give Client or [ClientOpts], not both.
func Client(cl *kgo.Client) Option {
	return optionFunc(func(c *config) error {
		if cl == nil {
			return errors.New("console: Client(nil)")
		}
		c.client = cl
		return nil
	})
}

// ClientOpts makes the console connect to Kafka with opts (seed brokers,
// TLS, SASL): each request makes its own client and closes it when done.
func ClientOpts(opts ...kgo.Opt) Option {
	return optionFunc(func(c *config) error {
		if len(opts) == 0 {
			return errors.New("console: ClientOpts without options: give at least kgo.SeedBrokers")
		}
		c.clientOpts = append(c.clientOpts, opts...)
		return nil
	})
}

// Prefix is the path the console is served under, such as "/console",
// when the handler is mounted there without stripping it (the default is
// "/": the handler serves the root). Links and forms carry the prefix.
func Prefix(p string) Option {
	return optionFunc(func(c *config) error {
		if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#\"'<> ") {
			return fmt.Errorf("console: Prefix(%q): want a path starting with /", p)
		}
		c.prefix = strings.TrimRight(p, "/")
		return nil
	})
}

// Actions enables the actions: replaying parked jobs, enqueueing a job
// and resetting a group's start offsets. Without it the console is
// read-only: it shows no forms and refuses every POST.
func Actions() Option {
	return optionFunc(func(c *config) error { c.actions = true; return nil })
}

// ReplayRate caps the jobs per second a replay started from the console
// re-produces; 0 means no cap. Default [ReplayRateDefault].
func ReplayRate(perSecond float64) Option {
	return optionFunc(func(c *config) error {
		if perSecond < 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) {
			return fmt.Errorf("console: ReplayRate(%v): want 0 (no cap) or a positive number", perSecond)
		}
		c.rate = perSecond
		return nil
	})
}

// PageSize is how many parked jobs a DLQ page shows. Default
// [PageSizeDefault].
func PageSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 || n > 1000 {
			return fmt.Errorf("console: PageSize(%d): want 1 to 1000", n)
		}
		c.pageSize = n
		return nil
	})
}

// PayloadLimit caps the bytes of a payload the job page shows. Default
// [PayloadLimitDefault].
func PayloadLimit(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("console: PayloadLimit(%d): want at least 1", n)
		}
		c.payload = n
		return nil
	})
}

// ScanLimit caps the records of each DLQ partition one page of a
// filtered DLQ list reads looking for matches; a page that reaches it
// shows the matches found and links to the next, older, stretch. Default
// [ScanLimitDefault].
func ScanLimit(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("console: ScanLimit(%d): want at least 1", n)
		}
		c.scan = n
		return nil
	})
}

// Outbox adds the outbox page, read from db (a *pgxpool.Pool fits).
func Outbox(db OutboxDB) Option {
	return optionFunc(func(c *config) error {
		if db == nil {
			return errors.New("console: Outbox(nil)")
		}
		c.outbox = db
		return nil
	})
}

// Logger receives the errors the pages show, and a line per action.
// Default slog.Default().
func Logger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return errors.New("console: Logger(nil)")
		}
		c.logger = l
		return nil
	})
}

func newConfig(opts []Option) (*config, error) {
	c := &config{rate: ReplayRateDefault, pageSize: PageSizeDefault, payload: PayloadLimitDefault, scan: ScanLimitDefault}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("console: nil Option")
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	switch {
	case c.client == nil && c.clientOpts == nil:
		return nil, errors.New("console: no Kafka: give Client or ClientOpts")
	case c.client != nil && c.clientOpts != nil:
		return nil, errors.New("console: give Client or ClientOpts, not both")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}
