package workerfx

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"go.uber.org/fx"

	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// Lag exports the share-group lag of [Module]'s worker, the backlog an
// autoscaler (KEDA) scales workers on: it registers a
// metrics.LagCollector for the worker's group with the app's
// prometheus.Registerer, reading the group's offsets through the app's
// *kadm.Client at scrape time (package metrics documents the series and
// opts, with their defaults). The app provides both (the module provides
// neither: a missing one fails fx.New); the collector starts no goroutine
// and is unregistered when the app stops. The app's *slog.Logger, when it
// provides one, logs failed readings, unless opts set metrics.LagLogger.
//
// For a group that starts at the earliest offset (a job queue's setting),
// pass metrics.LagTopics with the worker's topics, so that the lag exists
// before the first worker joins (scaling from zero needs it).
func Lag(opts ...metrics.LagOption) fx.Option { return LagFor("", opts...) }

// LagFor is [Lag] for the worker named name ([Named]).
func LagFor(name string, opts ...metrics.LagOption) fx.Option {
	register := func(lc fx.Lifecycle, adm *kadm.Client, reg prometheus.Registerer, w *worker.Worker, log *slog.Logger) error {
		lopts := opts
		if log != nil {
			lopts = append([]metrics.LagOption{metrics.LagLogger(log)}, opts...)
		}
		c := metrics.NewLagCollector(adm, w.Group(), lopts...)
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("workerfx: register the lag collector of group %q: %w", w.Group(), err)
		}
		lc.Append(fx.StopHook(func(context.Context) error {
			reg.Unregister(c)
			return nil
		}))
		return nil
	}
	return fx.Invoke(fx.Annotate(register, fx.ParamTags("", "", "", nameTag(name), `optional:"true"`)))
}
