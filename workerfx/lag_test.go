package workerfx_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/workerfx"
)

// lagTotal returns shareq_share_group_lag_total of group and topic in
// reg, or -1 when there is no such series.
func lagTotal(t *testing.T, reg prometheus.Gatherer, group, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "shareq_share_group_lag_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == group && labels["topic"] == topic {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Lag exports the worker group's lag on the app's registry: the jobs
// held by running handlers and those waiting count, and the lag falls to
// 0 once they are acknowledged; the collector is unregistered at stop.
func TestLagExportsTheWorkersGroupLag(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.produce(t, "a", "b", "c")
	release := make(chan struct{})
	hold := handler.Func(func(ctx context.Context, job *handler.Job) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		fx.Supply(quietLogger(), b.c.Admin()),
		registerer(reg),
		workerfx.Module,
		fx.Supply(b.config()), // Concurrency 2: two jobs held, one waiting
		workerfx.Handle(b.topic, hold),
		workerfx.Lag(metrics.LagTopics(b.topic), metrics.LagMinInterval(0)),
	)
	// Before any worker joined: every record of the topic (LagTopics).
	if got := lagTotal(t, reg, b.group, b.topic); got != 3 {
		t.Errorf("lag before start = %v, want 3", got)
	}
	app.RequireStart()
	waitFor := func(what string, want float64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for got := lagTotal(t, reg, b.group, b.topic); got != want; got = lagTotal(t, reg, b.group, b.topic) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: lag %v after 60s, want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("jobs held by handlers", 3)
	close(release)
	waitFor("jobs acknowledged", 0)
	app.RequireStop()
	if got := lagTotal(t, reg, b.group, b.topic); got != -1 {
		t.Errorf("lag after stop = %v, want no series (collector unregistered)", got)
	}
}

// Lag needs the app's *kadm.Client and prometheus.Registerer and
// provides neither: without them the app does not build.
func TestLagNeedsTheAppsAdminAndRegisterer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		name string
		opts []fx.Option
		want string
	}{
		{"no admin client", []fx.Option{registerer(prometheus.NewRegistry())}, "kadm.Client"},
		{"no registerer", []fx.Option{fx.Supply(b.c.Admin())}, "prometheus.Registerer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			app := fx.New(append(c.opts, fx.NopLogger, fx.Supply(b.config()), workerfx.Module,
				workerfx.Handle(b.topic, handler.Func(noop)), workerfx.Lag())...)
			if err := app.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("app without %s: Err() = %v, want it to name %s", c.want, err, c.want)
			}
		})
	}
}
