package shareqotel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/shareq/shareq/shareqotel"

// Semconv selects the version of the messaging semantic conventions the
// spans follow, as the conventions' OTEL_SEMCONV_STABILITY_OPT_IN does.
type Semconv int8

const (
	// SemconvFromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN when [New] runs:
	// "messaging/dup" is [SemconvDup]; anything else ("messaging", or
	// unset) is [SemconvNew]. The default. The variable has no value for
	// the old conventions: ask for them with [SemanticConventions].
	SemconvFromEnv Semconv = iota
	// SemconvOld emits the conventions of semconv v1.24, the ones other
	// Kafka instrumentations emit by default, for dashboards and queries
	// built on them: span names "<topic> publish", "<topic> create" and
	// "<topic> process", messaging.operation, messaging.kafka.consumer.group,
	// messaging.kafka.destination.partition, messaging.kafka.message.offset.
	SemconvOld
	// SemconvNew emits the current conventions only: span names
	// "send <topic>", "create <topic>" and "process <topic>",
	// messaging.operation.name and .type, messaging.consumer.group.name,
	// messaging.destination.partition.id, messaging.kafka.offset.
	SemconvNew
	// SemconvDup emits both sets of attributes, with the current span
	// names.
	SemconvDup
)

// semconvFromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN, a comma-separated
// list: messaging/dup asks for both sets of attributes.
func semconvFromEnv() Semconv {
	for _, s := range strings.Split(os.Getenv("OTEL_SEMCONV_STABILITY_OPT_IN"), ",") {
		if strings.TrimSpace(s) == "messaging/dup" {
			return SemconvDup
		}
	}
	return SemconvNew
}

// An Option configures [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	prop    propagation.TextMapPropagator
	semconv Semconv
	keys    bool
	link    bool
	logIDs  bool
	errs    []error
}

// TracerProvider sets the tracer provider. Default: the global one
// (otel.GetTracerProvider), looked up when [New] runs.
func TracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			c.errs = append(c.errs, errors.New("TracerProvider: nil"))
		}
		c.tp = tp
	})
}

// MeterProvider sets the meter provider. Default: the global one
// (otel.GetMeterProvider), looked up when [New] runs.
func MeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp == nil {
			c.errs = append(c.errs, errors.New("MeterProvider: nil"))
		}
		c.mp = mp
	})
}

// Propagator sets the propagator that writes a trace context into a job's
// headers and reads it back. Default: the global one
// (otel.GetTextMapPropagator), looked up when [New] runs; an app that set
// none gets a no-op one, so set W3C trace context there
// (propagation.TraceContext{}) or here.
func Propagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p == nil {
			c.errs = append(c.errs, errors.New("Propagator: nil"))
		}
		c.prop = p
	})
}

// SemanticConventions selects the conventions' version explicitly instead
// of from OTEL_SEMCONV_STABILITY_OPT_IN. Default [SemconvFromEnv].
func SemanticConventions(s Semconv) Option {
	return optionFunc(func(c *config) {
		if s < SemconvFromEnv || s > SemconvDup {
			c.errs = append(c.errs, fmt.Errorf("SemanticConventions(%d): unknown", s))
		}
		c.semconv = s
	})
}

// RecordKeys puts each record's key on the spans
// (messaging.kafka.message.key) when it is valid UTF-8. Default off: a key
// is often a customer or user ID, which a trace backend should not hold
// unless you decide it may.
func RecordKeys() Option { return optionFunc(func(c *config) { c.keys = true }) }

// LinkToJob makes each run of a job the root of a trace of its own,
// linked to the span that created the job, instead of its child (the
// default: see the package documentation, "One trace or one per run").
// It suits jobs that run long after the request that enqueued them, a
// request that enqueues many jobs, and runs a sampler should decide on
// by themselves; it is the messaging conventions' default.
func LinkToJob() Option { return optionFunc(func(c *config) { c.link = true }) }

// NoLogIDs keeps the job's logger as the worker made it. Default: the
// middleware gives the handler's context a logger (handler.Logger) with
// trace_id and span_id attributes when the run's span is sampled.
func NoLogIDs() Option { return optionFunc(func(c *config) { c.logIDs = false }) }

// Telemetry traces and measures jobs: on the producer side through
// [Telemetry.Producer] and [Telemetry.Inject], on the worker through
// [Telemetry.Middleware] and the worker events it observes (it is a
// worker.Observer: pass it to worker.Observers). Make one with [New]
// and share it; it is safe for concurrent use.
type Telemetry struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	semconv Semconv
	keys    bool
	link    bool
	logIDs  bool

	runs runMap
	// base caches a *runBase by topic and group: a map copied on write
	// (under baseMu), read without a lock, as every job reads it and a new
	// topic or group is rare (a sync.Map would box each key; a read lock
	// is a write to a cache line every core shares).
	baseMu sync.Mutex
	base   atomic.Pointer[map[[2]string]*runBase]

	inst instruments
}

var _ worker.Observer = (*Telemetry)(nil)

// New returns a Telemetry configured by opts.
func New(opts ...Option) (*Telemetry, error) {
	c := config{logIDs: true}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("nil Option"))
			continue
		}
		o.apply(&c)
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("shareqotel: %w", errors.Join(c.errs...))
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	if c.semconv == SemconvFromEnv {
		c.semconv = semconvFromEnv()
	}
	t := &Telemetry{
		tracer:  c.tp.Tracer(ScopeName),
		prop:    c.prop,
		semconv: c.semconv,
		keys:    c.keys,
		link:    c.link,
		logIDs:  c.logIDs,
	}
	t.base.Store(new(map[[2]string]*runBase))
	if err := t.inst.init(c.mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("shareqotel: instruments: %w", err)
	}
	return t, nil
}

// jobHeaders adapts a job's headers to a propagation.TextMapCarrier for
// reading (Set is unused: the worker's jobs are read-only). With a
// prefix, it reads the headers named prefix+key.
type jobHeaders struct {
	hs     []handler.Header
	prefix string
}

func (c jobHeaders) Get(key string) string {
	for i := len(c.hs) - 1; i >= 0; i-- {
		if h := c.hs[i]; len(h.Key) == len(c.prefix)+len(key) && strings.HasPrefix(h.Key, c.prefix) && h.Key[len(c.prefix):] == key {
			return string(h.Value)
		}
	}
	return ""
}

func (jobHeaders) Set(string, string) {}

func (c jobHeaders) Keys() []string {
	var ks []string
	for _, h := range c.hs {
		if strings.HasPrefix(h.Key, c.prefix) {
			ks = append(ks, h.Key[len(c.prefix):])
		}
	}
	return ks
}
