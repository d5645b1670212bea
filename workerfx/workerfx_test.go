package workerfx_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
	"github.com/shareq/shareq/workerfx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is a cluster with a topic and a group of the test's own.
type bundle struct {
	c     *kafkatest.Cluster
	topic string
	group string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	c := kafkatest.New(t)
	return &bundle{c: c, topic: c.Topic(t, 2), group: c.Group(t)}
}

func (b *bundle) config(opts ...worker.Option) workerfx.Config {
	return workerfx.Config{Options: append([]worker.Option{worker.Group(b.group), worker.Brokers(b.c.Seeds...), worker.Concurrency(2)}, opts...)}
}

func (b *bundle) produce(t *testing.T, values ...string) {
	t.Helper()
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: b.topic, Value: []byte(v)}
	}
	b.c.Produce(t, recs...)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// registerer supplies reg to the app as its prometheus.Registerer.
func registerer(reg *prometheus.Registry) fx.Option {
	return fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer))))
}

// A handler registered through the value group processes a job; the
// worker's events reach the metrics registered with the app's registry.
func TestModuleRunsRoutedHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.produce(t, "cat.jpg")

	got := make(chan string, 1)
	newRoute := func(logger *slog.Logger) workerfx.Route {
		return workerfx.Route{Topic: b.topic, Handler: handler.Func(func(ctx context.Context, job *handler.Job) error {
			got <- string(job.Value)
			return nil
		})}
	}
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(b.config()),
		fx.Provide(workerfx.AsRoute(newRoute)),
		fx.Supply(quietLogger()),
		registerer(reg),
	).RequireStart()

	select {
	case v := <-got:
		if v != "cat.jpg" {
			t.Errorf("handler got %q, want cat.jpg", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the routed handler got no job within 30s")
	}
	waitFor(t, 10*time.Second, "the job to be acknowledged", func() bool {
		return jobsTotal(t, reg, b.topic, "accept") == 1
	})
	app.RequireStop()
	if n := memberLeft(t, reg); n != 1 {
		t.Errorf("member_state{state=left} after stop = %v, want 1", n)
	}
}

// A worker whose topic does not exist fails its start-up check in OnStart,
// so the app does not start and says why.
func TestMissingTopicFailsStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	app := fx.New(
		workerfx.Module,
		fx.Supply(b.config()),
		workerfx.Handle("no-such-topic-"+b.topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
		fx.NopLogger,
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil {
		_ = app.Stop(ctx)
		t.Fatal("app started with a missing topic")
	}
	if !errors.Is(err, worker.ErrTopicMissing) || !strings.Contains(err.Error(), "no-such-topic-") {
		t.Fatalf("start error %v does not name the missing topic", err)
	}
}

// Stopping the app waits for the running handler to finish and for its
// acknowledgement.
func TestStopWaitsForRunningHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.produce(t, "slow")
	started := make(chan struct{})
	var finished atomic.Bool
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(b.config()),
		workerfx.Handle(b.topic, handler.Func(func(ctx context.Context, job *handler.Job) error {
			close(started)
			time.Sleep(500 * time.Millisecond)
			finished.Store(true)
			return nil
		})),
		fx.Supply(quietLogger()),
		registerer(reg),
	).RequireStart()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no job started within 30s")
	}
	app.RequireStop()
	if !finished.Load() {
		t.Error("the app stopped before the running handler finished")
	}
	if n := jobsTotal(t, reg, b.topic, "accept"); n != 1 {
		t.Errorf("jobs accepted by the time Stop returned = %v, want 1", n)
	}
}

// The app's stop timeout bounds the wait for the worker: a handler that
// outlasts it makes Stop return an error rather than hang. The worker
// still stops by itself at its shutdown timeout.
func TestStopIsBoundedByTheStopTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.produce(t, "stuck")
	started := make(chan struct{})
	reg := prometheus.NewRegistry()
	cfg := b.config(worker.ShutdownTimeout(time.Second))
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(cfg),
		workerfx.Handle(b.topic, handler.Func(func(ctx context.Context, job *handler.Job) error {
			close(started)
			<-ctx.Done() // cancelled at the worker's shutdown timeout
			return ctx.Err()
		})),
		fx.Supply(quietLogger()),
		registerer(reg),
	).RequireStart()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no job started within 30s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := app.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want the stop timeout reported", err)
	}
	// The worker releases the job at its shutdown timeout and returns.
	waitFor(t, 30*time.Second, "the worker to stop", func() bool {
		return jobsTotal(t, reg, b.topic, "release") == 1 && memberLeft(t, reg) == 1
	})
}

func TestRoutesFromHandleAndAsRoute(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.c.Topic(t, 1)
	b.produce(t, "a")
	b.c.Produce(t, &kgo.Record{Topic: other, Value: []byte("b")})

	got := make(chan string, 2)
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		got <- job.Topic
		return nil
	})
	// A route's middleware runs inside the worker.Use middleware.
	var order []string
	var orderMu sync.Mutex
	mw := func(name string) handler.Middleware {
		return func(next handler.Handler) handler.Handler {
			return handler.Func(func(ctx context.Context, job *handler.Job) error {
				if job.Topic == other {
					orderMu.Lock()
					order = append(order, name)
					orderMu.Unlock()
				}
				return next.Handle(ctx, job)
			})
		}
	}
	cfg := b.config(worker.Use(mw("use")))
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(cfg),
		workerfx.Handle(b.topic, h),
		fx.Provide(workerfx.AsRoute(func() (workerfx.Route, error) {
			return workerfx.Route{Topic: other, Handler: h, Middleware: []handler.Middleware{mw("route")}}, nil
		})),
		fx.Supply(quietLogger()),
	).RequireStart()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case topic := <-got:
			seen[topic] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("jobs of topics %v only", seen)
		}
	}
	app.RequireStop()
	if !seen[b.topic] || !seen[other] {
		t.Errorf("topics handled = %v", seen)
	}
	orderMu.Lock()
	defer orderMu.Unlock()
	if strings.Join(order, ",") != "use,route" {
		t.Errorf("middleware order = %v, want [use route]", order)
	}
}

// Without a registerer the worker runs without an observer, and the
// *metrics.Metrics the module provides still works as a hook.
func TestWithoutRegisterer(t *testing.T) {
	t.Parallel()
	var m *metrics.Metrics
	var w *worker.Worker
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(workerfx.Config{Options: []worker.Option{worker.Group("g"), worker.Brokers("127.0.0.1:1")}}),
		workerfx.Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })),
		fx.Populate(&m, &w),
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if m == nil || w == nil {
		t.Fatal("the module provided no *metrics.Metrics or *worker.Worker")
	}
	m.Duplicate(&handler.Job{Topic: "t"}, "k") // must not panic
	if w.Group() != "g" || strings.Join(w.Topics(), ",") != "t" {
		t.Errorf("worker group %q topics %v", w.Group(), w.Topics())
	}
}

// Configuration errors fail the app's construction, before anything runs.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	noop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	cfg := func(opts ...worker.Option) workerfx.Config {
		return workerfx.Config{Options: append([]worker.Option{worker.Group("g"), worker.Brokers("b:9092")}, opts...)}
	}
	for _, c := range []struct {
		name string
		opts []fx.Option
		want string
	}{
		{"no routes", []fx.Option{fx.Supply(cfg())}, `no handlers`},
		{"no group", []fx.Option{fx.Supply(workerfx.Config{Options: []worker.Option{worker.Brokers("b:9092")}}), workerfx.Handle("t", noop)}, "Group: the share group name is required"},
		{"bad concurrency", []fx.Option{fx.Supply(cfg(worker.Concurrency(-1))), workerfx.Handle("t", noop)}, "Concurrency(-1)"},
		{"topic twice", []fx.Option{fx.Supply(cfg()), workerfx.Handle("t", noop), workerfx.Handle("t", noop)}, `Handle("t"): topic registered twice`},
		{"no config", []fx.Option{workerfx.Handle("t", noop)}, "workerfx.Config.Options"},
		{"named without its routes", []fx.Option{workerfx.Named("mail", worker.Group("g"), worker.Brokers("b:9092")), workerfx.Handle("t", noop), fx.Supply(cfg())}, `worker "mail"`},
		{"named without a name", []fx.Option{workerfx.Named(" ")}, "Named needs a worker name"},
		{"two workers, one name", []fx.Option{
			workerfx.Named("mail", worker.Group("g"), worker.Brokers("b:9092")),
			workerfx.Named("mail", worker.Group("g2"), worker.Brokers("b:9092")),
			workerfx.HandleFor("mail", "t", noop),
		}, "already provided"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			app := fx.New(append([]fx.Option{workerfx.Module, fx.NopLogger}, c.opts...)...)
			if err := app.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("app error = %v, want one containing %q", err, c.want)
			}
		})
	}
}

// Config.MetricsOptions reach the metrics the module registers.
func TestMetricsOptions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	app := fx.New(workerfx.Module, fx.NopLogger, registerer(reg),
		fx.Supply(workerfx.Config{Options: []worker.Option{worker.Group("g"), worker.Brokers("b:9092")}, MetricsOptions: []metrics.Option{
			metrics.ConstLabels(prometheus.Labels{"app": "thumbs"}),
			metrics.Topics("t"),
		}}),
		workerfx.Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })))
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP shareq_jobs_in_flight Handlers started and not yet acknowledged.
# TYPE shareq_jobs_in_flight gauge
shareq_jobs_in_flight{app="thumbs",topic="t"} 0
`), "shareq_jobs_in_flight")
	if err != nil {
		t.Error(err)
	}
}

// A registerer that already has the worker metrics fails construction.
func TestRegistererConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	app := fx.New(workerfx.Module, fx.NopLogger, registerer(reg),
		fx.Supply(workerfx.Config{Options: []worker.Option{worker.Group("g"), worker.Brokers("b:9092")}}),
		workerfx.Handle("t", handler.Func(func(context.Context, *handler.Job) error { return nil })))
	var are prometheus.AlreadyRegisteredError
	if err := app.Err(); !errors.As(err, &are) {
		t.Errorf("app error = %v, want an AlreadyRegisteredError", err)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// value returns the value of the counter or gauge series of name whose
// labels include labels; a series not yet there reads as 0.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var n float64 // the sum of the matching series (jobs_total{ack} over outcome)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return n
}

func jobsTotal(t *testing.T, reg *prometheus.Registry, topic, ack string) float64 {
	t.Helper()
	return value(t, reg, "shareq_jobs_total", map[string]string{"topic": topic, "ack": ack})
}

// memberLeft is 1 once the worker's share-group member has left the group.
func memberLeft(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return value(t, reg, "shareq_member_state", map[string]string{"state": "left"})
}

// Two workers in one app, the unnamed one of Module and one of Named, each
// with its own group, options and routes, both registered in one registry
// (the named one's series carry worker=<name>); each provided worker says
// it stopped, gracefully, once the app has stopped.
func TestTwoWorkersInOneApp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mailTopic, mailGroup := b.c.Topic(t, 1), b.c.Group(t)
	b.produce(t, "cat.jpg")
	b.c.Produce(t, &kgo.Record{Topic: mailTopic, Value: []byte("ada@example.com")})

	got := make(chan string, 2)
	record := func(what string) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			got <- what + " " + string(job.Value)
			return nil
		})
	}
	type workers struct {
		fx.In
		Thumbnails *worker.Worker
		Mailer     *worker.Worker   `name:"mailer"`
		MailerM    *metrics.Metrics `name:"mailer"`
	}
	var ws workers
	reg := prometheus.NewRegistry()
	app := fxtest.New(t,
		workerfx.Module,
		fx.Supply(b.config()),
		workerfx.Handle(b.topic, record("resized")),
		workerfx.Named("mailer", worker.Group(mailGroup), worker.Brokers(b.c.Seeds...)),
		workerfx.SupplyConfig("mailer", workerfx.Config{Options: []worker.Option{worker.Concurrency(3)}}),
		fx.Provide(workerfx.AsRouteFor("mailer", func() workerfx.Route {
			return workerfx.Route{Topic: mailTopic, Handler: record("mailed")}
		})),
		fx.Populate(&ws),
		fx.Supply(quietLogger()),
		registerer(reg),
	)
	app.RequireStart()
	if ws.Thumbnails == ws.Mailer || ws.Thumbnails.Group() != b.group || ws.Mailer.Group() != mailGroup {
		t.Fatalf("workers of groups %q and %q, want %q and %q", ws.Thumbnails.Group(), ws.Mailer.Group(), b.group, mailGroup)
	}
	if ws.MailerM == nil {
		t.Fatal("no *metrics.Metrics named mailer")
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case s := <-got:
			seen[s] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("jobs done: %v, want both workers' job", seen)
		}
	}
	if !seen["resized cat.jpg"] || !seen["mailed ada@example.com"] {
		t.Errorf("jobs done = %v", seen)
	}
	waitFor(t, 10*time.Second, "both jobs to be acknowledged", func() bool {
		return value(t, reg, "shareq_jobs_total", map[string]string{"topic": b.topic, "ack": "accept"}) == 1 &&
			value(t, reg, "shareq_jobs_total", map[string]string{"topic": mailTopic, "ack": "accept", "worker": "mailer"}) == 1
	})
	for _, w := range []*worker.Worker{ws.Thumbnails, ws.Mailer} {
		select {
		case <-w.Stopped():
			t.Fatalf("worker of group %s stopped while the app runs: %v", w.Group(), w.Err())
		default:
		}
	}
	app.RequireStop()
	for _, w := range []*worker.Worker{ws.Thumbnails, ws.Mailer} {
		select {
		case <-w.Stopped():
		default:
			t.Fatalf("worker of group %s not stopped after the app stopped", w.Group())
		}
		if err := w.Err(); err != nil {
			t.Errorf("worker of group %s: Err = %v after a graceful stop", w.Group(), err)
		}
	}
}

// A named worker's start-up check fails app.Start with its name and the
// reason.
func TestNamedWorkerMissingTopicFailsStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var w *worker.Worker
	app := fx.New(
		workerfx.Named("mailer", worker.Group(b.group), worker.Brokers(b.c.Seeds...)),
		workerfx.HandleFor("mailer", "no-such-topic-"+b.topic, handler.Func(func(context.Context, *handler.Job) error { return nil })),
		fx.Populate(fx.Annotate(&w, fx.ParamTags(`name:"mailer"`))),
		fx.NopLogger,
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil {
		_ = app.Stop(ctx)
		t.Fatal("app started with a missing topic")
	}
	if !errors.Is(err, worker.ErrTopicMissing) || !strings.Contains(err.Error(), `worker "mailer"`) {
		t.Fatalf("start error %v does not name the worker and the missing topic", err)
	}
}

// The app's workers stop together, each within its own ShutdownTimeout
// but all at once: an app of named workers whose running jobs outlast
// their ShutdownTimeout stops within fx's stop timeout when it allows
// one worker's stop, not one per worker.
func TestNamedWorkersStopTogether(t *testing.T) {
	t.Parallel()
	const workers, shutdown = 3, 1500 * time.Millisecond
	c := kafkatest.New(t)
	reg := prometheus.NewRegistry()
	started := make(chan string, workers)
	topics := map[string]string{}
	opts := []fx.Option{fx.Supply(quietLogger()), registerer(reg),
		// Longer than one worker's stop, shorter than the workers' one
		// after another.
		fx.StopTimeout(workers*shutdown - shutdown/2)}
	for i := range workers {
		name, topic := fmt.Sprintf("w%d", i), c.Topic(t, 1)
		topics[name] = topic
		c.Produce(t, &kgo.Record{Topic: topic, Value: []byte(name)})
		opts = append(opts,
			workerfx.Named(name, worker.Group(c.Group(t)), worker.Brokers(c.Seeds...), worker.ShutdownTimeout(shutdown)),
			workerfx.HandleFor(name, topic, handler.Func(func(ctx context.Context, job *handler.Job) error {
				started <- name
				<-ctx.Done() // cancelled at the worker's shutdown timeout
				return ctx.Err()
			})))
	}
	app := fxtest.New(t, opts...)
	app.RequireStart()
	for range workers {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("a worker's job did not start within 30s")
		}
	}
	begin := time.Now()
	app.RequireStop() // within fx's stop timeout, or the test fails
	took := time.Since(begin)
	t.Logf("%d workers stopped in %v (ShutdownTimeout %v, stop timeout %v)", workers, took, shutdown, app.StopTimeout())
	if took < shutdown {
		t.Errorf("the app stopped in %v, before the workers' ShutdownTimeout (%v) let their jobs run", took, shutdown)
	}
	for name, topic := range topics {
		if n := value(t, reg, "shareq_jobs_total", map[string]string{"topic": topic, "ack": "release", "worker": name}); n != 1 {
			t.Errorf("worker %s: jobs released at its shutdown timeout = %v, want 1", name, n)
		}
	}
}
