package workerfx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
	"github.com/shareq/shareq/workerfx/internal/fxrun"
)

// RoutesGroup is the fx value group that the [Route]s of the worker of
// [Module] are collected from. A constructor's result joins it with the
// struct tag `group:"shareq.handlers"`, or through [AsRoute]. The worker
// named n of [Named] has the group [RoutesGroupFor](n).
const RoutesGroup = "shareq.handlers"

// ShutdownTimeoutDefault is the worker's shutdown timeout unless its
// options set worker.ShutdownTimeout. It is shorter than the worker
// package's own default so that a graceful stop fits in fx's default stop
// timeout (15 s): running handlers get 10 s, then the acknowledgements are
// flushed and the clients closed. The app's workers stop at the same
// time, so the app's stop takes one shutdown timeout, not one per worker
// (see the package documentation, "Lifecycle and health").
const ShutdownTimeoutDefault = 10 * time.Second

// Module runs a shareq worker for the life of an fx application. It takes
// a [Config] (with the worker's options) and the [Route]s of the
// "shareq.handlers" group from the app, and provides:
//
//   - *worker.Worker, built with worker.New from the Config's options and
//     every Route (its Stopped and Err methods say when and why it
//     stopped);
//   - *metrics.Metrics, registered with the app's prometheus.Registerer
//     when the app provides one (then also the worker's observer), else
//     unregistered. Routes may depend on it to count parked jobs and
//     suppressed duplicates (see the package documentation).
//
// It also uses an *slog.Logger when the app provides one (else
// slog.Default()). On start it runs the worker's start-up checks (a
// failure fails app.Start) and then the worker, in a goroutine; if the
// worker stops by itself, the error is logged and the app is shut down
// with exit code 1. On stop it stops the worker gracefully, together with
// the app's other workers, and waits for it, up to fx's stop timeout.
//
// For more than one worker in an app, use [Named] for the others.
var Module = workerModule("")

// Named runs another worker in the same app, the worker called name, in
// every way like [Module]'s but with values of its own: its [Config] is
// the one named name (see [SupplyConfig] and [ConfigFor]; optional, since
// opts may be all it needs), its routes come from the group
// [RoutesGroupFor](name) (see [HandleFor] and [AsRouteFor]), and it
// provides a *worker.Worker and a *metrics.Metrics both named name (the
// fx tag `name:"<name>"`).
//
// In an app with more than one worker, every worker's metrics carry the
// constant label worker=<name> (worker="" for Module's, which Prometheus
// reads as no label), so that their series differ in one registry; a
// metrics.ConstLabels in a worker's MetricsOptions replaces that label and
// should then set worker too.
//
// opts are worker options applied before the Config's. Names must be
// unique within the app and non-empty.
func Named(name string, opts ...worker.Option) fx.Option {
	if strings.TrimSpace(name) == "" {
		return fx.Error(errors.New("workerfx: Named needs a worker name; use workerfx.Module for an app's unnamed worker"))
	}
	return workerModule(name, opts...)
}

// RoutesGroupFor is the value group of the routes of the worker named
// name: [RoutesGroup] for "" ([Module]'s worker), else
// "shareq.handlers.<name>".
func RoutesGroupFor(name string) string {
	if name == "" {
		return RoutesGroup
	}
	return RoutesGroup + "." + name
}

// Config is a worker's configuration, supplied by the app (with fx.Supply,
// or a constructor that reads the app's own configuration). Supplying one
// is optional when [Named]'s options say everything.
type Config struct {
	// Options are the worker's options, as package worker documents them
	// with their defaults: worker.Group and worker.Brokers (or
	// kgo.SeedBrokers in worker.ClientOpts) are required;
	// worker.Concurrency, worker.Use, worker.AutoOffsetReset,
	// worker.RequireTopics, worker.MaxHold, worker.Observers and the
	// others are not. The module's own (the app's logger,
	// ShutdownTimeout([ShutdownTimeoutDefault]), the metrics observer)
	// come first, so these win. worker.Handle adds routes too.
	Options []worker.Option
	// MetricsOptions configure the *metrics.Metrics the module provides:
	// metrics.ConstLabels, metrics.Topics, buckets.
	MetricsOptions []metrics.Option
}

// SupplyConfig supplies c as the Config of the worker named name ("" for
// [Module]'s).
func SupplyConfig(name string, c Config) fx.Option {
	if name == "" {
		return fx.Supply(c)
	}
	return fx.Supply(fx.Annotated{Name: name, Target: c})
}

// ConfigFor annotates constructor, a function that returns a [Config]
// (and optionally an error), so that its result is the Config of the
// worker named name ("" for [Module]'s):
//
//	fx.Provide(workerfx.ConfigFor("emails", func(env *AppConfig) workerfx.Config { … }))
func ConfigFor(name string, constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(nameTag(name)))
}

// Route registers a handler for a topic. Provide routes to the
// "shareq.handlers" value group with [AsRoute] or [Handle], or from an
// fx.Out struct with a field tagged `group:"shareq.handlers"` (and a
// named worker's with [AsRouteFor] or [HandleFor]).
type Route struct {
	// Topic is the topic whose records the handler processes. It must
	// exist; a topic may have one route per worker.
	Topic string
	// Handler processes the topic's jobs.
	Handler handler.Handler
	// Middleware wraps Handler, the first listed outermost, inside the
	// worker's worker.Use middleware.
	Middleware []handler.Middleware
}

// AsRoute annotates constructor, a function that returns a [Route] (and
// optionally an error), so that its result joins the routes of [Module].
// Its parameters are injected as usual:
//
//	fx.Provide(workerfx.AsRoute(func(db *pgxpool.Pool, m *metrics.Metrics) (workerfx.Route, error) { … }))
func AsRoute(constructor any) any { return AsRouteFor("", constructor) }

// AsRouteFor is [AsRoute] for the worker named name ([Named]).
func AsRouteFor(name string, constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+RoutesGroupFor(name)+`"`))
}

// Handle provides a Route of [Module]'s worker for a handler that needs
// nothing injected.
func Handle(topic string, h handler.Handler, mws ...handler.Middleware) fx.Option {
	return HandleFor("", topic, h, mws...)
}

// HandleFor is [Handle] for the worker named name ([Named]).
func HandleFor(name, topic string, h handler.Handler, mws ...handler.Middleware) fx.Option {
	r := Route{Topic: topic, Handler: h, Middleware: mws}
	return fx.Provide(AsRouteFor(name, func() Route { return r }))
}

// workerName is the name of one of the app's workers, in the value group
// "shareq.workers": the workers' metrics are labelled with their names
// when there is more than one.
type workerName string

// nameTag is the fx tag of values named name; none for "".
func nameTag(name string) string {
	if name == "" {
		return ""
	}
	return `name:"` + name + `"`
}

// optional adds optional:"true" to tag.
func optional(tag string) string { return strings.TrimSpace(tag + ` optional:"true"`) }

// workerModule provides the worker called name (the unnamed one for "")
// and its metrics, and ties the worker to the app's lifecycle.
func workerModule(name string, opts ...worker.Option) fx.Option {
	tag := nameTag(name)
	label := "worker"
	if name != "" {
		label = fmt.Sprintf("worker %q", name)
	}
	newMetrics := func(c Config, reg prometheus.Registerer, workers []workerName) (*metrics.Metrics, error) {
		mopts := c.MetricsOptions
		if len(workers) > 1 {
			// Several workers share the registry: their series differ
			// in the worker label ("" for Module's, which Prometheus
			// reads as no label).
			mopts = append([]metrics.Option{metrics.ConstLabels(prometheus.Labels{"worker": name})}, mopts...)
		}
		// Unregistered metrics when the app has no registerer: their
		// hooks (Parked, Duplicate) still work.
		m, err := metrics.New(reg, mopts...)
		if err != nil {
			return nil, fmt.Errorf("workerfx: metrics of the %s: %w", label, err)
		}
		return m, nil
	}
	newWorker := func(c Config, routes []Route, m *metrics.Metrics, reg prometheus.Registerer, log *slog.Logger) (*worker.Worker, error) {
		wopts := []worker.Option{worker.ShutdownTimeout(ShutdownTimeoutDefault)}
		if log != nil {
			wopts = append(wopts, worker.Logger(log))
		}
		if reg != nil {
			wopts = append(wopts, worker.Observers(m))
		}
		wopts = append(wopts, opts...)
		wopts = append(wopts, c.Options...)
		for _, r := range routes {
			wopts = append(wopts, worker.Handle(r.Topic, r.Handler, r.Middleware...))
		}
		w, err := worker.New(wopts...)
		if err != nil {
			return nil, fmt.Errorf("workerfx: %s (its options come from workerfx.Config.Options, and its handlers from the %q group or worker.Handle): %w", label, RoutesGroupFor(name), err)
		}
		return w, nil
	}
	newState := func(w *worker.Worker) (*runState, *runState) {
		s := &runState{name: name, w: w}
		return s, s // one for the health group, one for run
	}
	run := func(lc fx.Lifecycle, sd fx.Shutdowner, s *runState, all []*runState, log *slog.Logger) {
		w := s.w
		group := w.Group()
		logArgs := []any{"group", group}
		if name != "" {
			logArgs = append(logArgs, "worker", name)
		}
		fxrun.Append(lc, sd, log, fxrun.Component{
			Pkg:     "workerfx",
			Name:    label,
			LogArgs: logArgs,
			Check:   w.Check,
			Run: func(ctx context.Context) error {
				s.started.Store(true)
				return w.Run(ctx)
			},
			TooSlow: fmt.Sprintf("%s of group %q did not stop within the app's stop timeout (raise fx.StopTimeout or lower worker.ShutdownTimeout)", label, group),
			Handle:  &s.stop,
			// Every worker of the app: the first OnStop stops them all,
			// so that their ShutdownTimeouts run at the same time.
			StopWith: stopHandles(all),
		})
	}
	module := "shareq"
	if name != "" {
		module = "shareq." + name
	}
	return fx.Module(module,
		fx.Provide(
			fx.Annotate(func() workerName { return workerName(name) }, fx.ResultTags(`group:"shareq.workers"`)),
			fx.Annotate(newMetrics, fx.ParamTags(optional(tag), `optional:"true"`, `group:"shareq.workers"`), fx.ResultTags(tag)),
			fx.Annotate(newWorker,
				fx.ParamTags(optional(tag), `group:"`+RoutesGroupFor(name)+`"`, tag, `optional:"true"`, `optional:"true"`),
				fx.ResultTags(tag)),
			fx.Annotate(newState, fx.ParamTags(tag), fx.ResultTags(`group:"`+healthGroup+`"`, tag)),
		),
		fx.Invoke(fx.Annotate(run, fx.ParamTags("", "", tag, `group:"`+healthGroup+`"`, `optional:"true"`))),
	)
}

// stopHandles are the handles that stop the workers of states.
func stopHandles(states []*runState) []*fxrun.Handle {
	hs := make([]*fxrun.Handle, len(states))
	for i, s := range states {
		hs[i] = &s.stop
	}
	return hs
}
