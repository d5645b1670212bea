package workerfx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// RoutesGroup is the fx value group that [Route]s are collected from. A
// constructor's result joins it with the struct tag
// `group:"shareq.handlers"`, or through [AsRoute].
const RoutesGroup = "shareq.handlers"

// ShutdownTimeoutDefault is the worker's shutdown timeout when
// [Config.ShutdownTimeout] is 0. It is shorter than the worker package's
// own default so that a graceful stop fits in fx's default stop timeout
// (15 s): running handlers get 10 s, then the acknowledgements are
// flushed and the clients closed.
const ShutdownTimeoutDefault = 10 * time.Second

// Module runs a shareq worker for the life of an fx application. It needs
// a [Config] and at least one [Route] from the app, and provides:
//
//   - *worker.Worker, built by [New] from the Config and every Route;
//   - *metrics.Metrics, registered with the app's prometheus.Registerer
//     when the app provides one (then also the worker's observer), else
//     unregistered. Routes may depend on it to count parked jobs and
//     suppressed duplicates (see the package documentation).
//
// It also uses an *slog.Logger when the app provides one (else
// slog.Default()). On start it runs the worker in a goroutine; if the
// worker fails (a start-up check such as a missing topic, or later) the
// error is logged and the app is shut down with exit code 1. On stop it
// stops the worker gracefully and waits for it, up to fx's stop timeout.
var Module = fx.Module("shareq",
	fx.Provide(New, newMetrics),
	fx.Invoke(run),
)

// Config is the worker's configuration, supplied by the app (with
// fx.Supply, or a constructor that reads the app's own configuration).
// Zero fields take the worker's defaults.
type Config struct {
	// Group is the share group the worker joins. Required.
	Group string
	// Brokers are the seed brokers, host:port. Required unless ClientOpts
	// has kgo.SeedBrokers.
	Brokers []string
	// ClientOpts are franz-go options for every client the worker makes:
	// TLS, SASL, a kgo logger (see worker.ClientOpts).
	ClientOpts []kgo.Opt
	// Concurrency is how many handlers run at once. Default
	// worker.ConcurrencyDefault.
	Concurrency int
	// ShutdownTimeout is how long a stopping worker lets running handlers
	// finish before cancelling them. Default [ShutdownTimeoutDefault]. Keep
	// it below fx's stop timeout (fx.StopTimeout, 15 s by default), or the
	// app stops waiting for the worker before the worker has acknowledged
	// the jobs that finished.
	ShutdownTimeout time.Duration
	// AutoOffsetReset sets the group's share.auto.offset.reset before the
	// worker joins: "earliest" or "latest". Default: leave it alone.
	AutoOffsetReset string
	// Use is middleware for the handlers of every topic, outside each
	// route's own middleware.
	Use []handler.Middleware
	// MetricsOptions configure the *metrics.Metrics the module provides:
	// metrics.ConstLabels, metrics.Topics, buckets.
	MetricsOptions []metrics.Option
	// Options are further worker options, applied after everything above
	// (so they win): worker.MaxHold, worker.RenewMargin,
	// worker.FetchMaxWait, worker.WithObserver to replace the metrics
	// observer, and so on.
	Options []worker.Option
}

// Route registers a handler for a topic. Provide routes to the
// "shareq.handlers" value group with [AsRoute] or [Handle], or from an
// fx.Out struct with a field tagged `group:"shareq.handlers"`.
type Route struct {
	// Topic is the topic whose records the handler processes. It must
	// exist; a topic may have one route.
	Topic string
	// Handler processes the topic's jobs.
	Handler handler.Handler
	// Middleware wraps Handler, the first listed outermost, inside
	// [Config.Use].
	Middleware []handler.Middleware
}

// AsRoute annotates constructor, a function that returns a [Route] (and
// optionally an error), so that its result joins the routes of [Module].
// Its parameters are injected as usual:
//
//	fx.Provide(workerfx.AsRoute(func(db *pgxpool.Pool, m *metrics.Metrics) (workerfx.Route, error) { … }))
func AsRoute(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+RoutesGroup+`"`))
}

// Handle provides a Route for a handler that needs nothing injected.
func Handle(topic string, h handler.Handler, mws ...handler.Middleware) fx.Option {
	r := Route{Topic: topic, Handler: h, Middleware: mws}
	return fx.Provide(AsRoute(func() Route { return r }))
}

// Params are the inputs of [New].
type Params struct {
	fx.In

	Config Config
	Routes []Route `group:"shareq.handlers"`
	// Metrics is provided by [Module].
	Metrics *metrics.Metrics
	// Registerer, when the app provides one, makes Metrics the worker's
	// observer.
	Registerer prometheus.Registerer `optional:"true"`
	Logger     *slog.Logger          `optional:"true"`
}

// Result is the output of [New].
type Result struct {
	fx.Out

	Worker *worker.Worker
}

// New builds the worker from the app's Config and Routes. It returns
// worker.New's error, which names every invalid setting, and an error when
// there is no route.
func New(p Params) (Result, error) {
	c := p.Config
	if len(p.Routes) == 0 {
		return Result{}, errors.New(`workerfx: no routes; provide at least one workerfx.Route to the "shareq.handlers" group with workerfx.AsRoute or workerfx.Handle`)
	}
	var opts []worker.Option
	if c.Group != "" {
		opts = append(opts, worker.Group(c.Group))
	}
	if len(c.Brokers) > 0 {
		opts = append(opts, worker.Brokers(c.Brokers...))
	}
	if len(c.ClientOpts) > 0 {
		opts = append(opts, worker.ClientOpts(c.ClientOpts...))
	}
	if c.Concurrency != 0 {
		opts = append(opts, worker.Concurrency(c.Concurrency))
	}
	shutdown := c.ShutdownTimeout
	if shutdown == 0 {
		shutdown = ShutdownTimeoutDefault
	}
	opts = append(opts, worker.ShutdownTimeout(shutdown))
	if c.AutoOffsetReset != "" {
		opts = append(opts, worker.AutoOffsetReset(c.AutoOffsetReset))
	}
	if len(c.Use) > 0 {
		opts = append(opts, worker.Use(c.Use...))
	}
	for _, r := range p.Routes {
		opts = append(opts, worker.Handle(r.Topic, r.Handler, r.Middleware...))
	}
	if p.Logger != nil {
		opts = append(opts, worker.Logger(p.Logger))
	}
	if p.Registerer != nil && p.Metrics != nil {
		opts = append(opts, worker.WithObserver(p.Metrics))
	}
	opts = append(opts, c.Options...)
	w, err := worker.New(opts...)
	if err != nil {
		return Result{}, fmt.Errorf("workerfx: %w", err)
	}
	return Result{Worker: w}, nil
}

type metricsParams struct {
	fx.In

	Config     Config
	Registerer prometheus.Registerer `optional:"true"`
}

// newMetrics registers the worker metrics with the app's registerer, or
// makes unregistered ones (whose hooks still work) when there is none.
func newMetrics(p metricsParams) (*metrics.Metrics, error) {
	m, err := metrics.New(p.Registerer, p.Config.MetricsOptions...)
	if err != nil {
		return nil, fmt.Errorf("workerfx: %w", err)
	}
	return m, nil
}

type runParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Worker     *worker.Worker
	Logger     *slog.Logger `optional:"true"`
}

// run ties the worker to the app's lifecycle.
func run(p runParams) {
	group := p.Worker.Group()
	appendRun(p.Lifecycle, p.Shutdowner, p.Logger, component{
		name:    "worker",
		logArgs: []any{"group", group},
		check:   p.Worker.Check,
		run:     p.Worker.Run,
		tooSlow: fmt.Sprintf("worker %q did not stop within the app's stop timeout (raise fx.StopTimeout or lower Config.ShutdownTimeout)", group),
	})
}

// component is something workerfx runs for the app's lifetime: the worker
// or the outbox relay.
type component struct {
	name    string // for errors and logs: "worker", "outbox relay"
	logArgs []any
	check   func(context.Context) error // start-up check, in OnStart
	run     func(context.Context) error // blocks until its context ends
	tooSlow string                      // OnStop's error when run outlasts the stop timeout
}

// appendRun ties c to the lifecycle. OnStart runs c's check (a failure
// fails app.Start) and starts c's run in a goroutine with a context of its
// own, since OnStart's ends with start-up; OnStop cancels it and waits for
// it within the stop timeout. A run that ends while the app runs shuts the
// app down with exit code 1 instead of leaving it up without its worker.
func appendRun(lc fx.Lifecycle, sd fx.Shutdowner, log *slog.Logger, c component) {
	if log == nil {
		log = slog.Default()
	}
	var (
		cancel context.CancelFunc
		done   chan error // run's error, or nil once the failure was reported
	)
	lc.Append(fx.Hook{
		OnStart: func(startCtx context.Context) error {
			if err := c.check(startCtx); err != nil {
				return fmt.Errorf("workerfx: %w", err)
			}
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			done = make(chan error, 1)
			go func() {
				err := c.run(ctx)
				if ctx.Err() != nil { // stopping: OnStop reports err
					done <- err
					return
				}
				if err == nil {
					err = errors.New(c.name + " stopped by itself")
				}
				log.Error("shareq: "+c.name+" failed; shutting the app down", append(slices.Clone(c.logArgs), "error", err)...)
				if serr := sd.Shutdown(fx.ExitCode(1)); serr != nil {
					log.Error("shareq: shutting the app down", "error", serr)
				}
				done <- nil
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("workerfx: %s: %w", c.name, err)
				}
				return nil
			case <-ctx.Done():
				return fmt.Errorf("workerfx: %s: %w", c.tooSlow, ctx.Err())
			}
		},
	})
}
