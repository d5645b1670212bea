package outboxfx_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/workerfx/outboxfx"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// registerer supplies reg to the app as its prometheus.Registerer.
func registerer(reg *prometheus.Registry) fx.Option {
	return fx.Supply(fx.Annotate(reg, fx.As(new(prometheus.Registerer))))
}

// relayBundle is a migrated schema (unless told otherwise), a cluster and
// a topic.
type relayBundle struct {
	pool  *pgxpool.Pool
	c     *kafkatest.Cluster
	topic string
}

func setupRelay(t *testing.T, migrate bool) *relayBundle {
	t.Helper()
	pool, _ := pgtest.NewPool(t, 8)
	if migrate {
		if err := migrations.Up(t.Context(), pool); err != nil {
			t.Fatal(err)
		}
	}
	c := kafkatest.New(t)
	return &relayBundle{pool: pool, c: c, topic: c.Topic(t, 1)}
}

// app returns the options of an app that owns b's pool and a client of
// b's cluster, with a quiet logger and a short poll.
func (b *relayBundle) app(t *testing.T, opts ...fx.Option) []fx.Option {
	return append([]fx.Option{
		fx.Supply(b.pool, b.c.Client(t, enqueue.ProducerOpts()...), quietLogger()),
		fx.Supply(outboxfx.Config{Options: []pgoutbox.RelayOption{pgoutbox.PollInterval(100 * time.Millisecond)}}),
		outboxfx.Module,
	}, opts...)
}

// enqueueTx commits one job for b's topic and returns its ID.
func (b *relayBundle) enqueueTx(t *testing.T, v any) string {
	t.Helper()
	var id string
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		id, err = pgoutbox.EnqueueTx(t.Context(), tx, b.topic, v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitUntil polls cond until it holds, failing t after a generous bound.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counter returns the value of the named counter in reg, or -1.
func counter(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// The module relays a job committed while the app runs, with its job ID,
// exports the relay's metrics on the app's registry, and stops with the
// app.
func TestModuleRelaysCommittedJobs(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, true)
	reg := prometheus.NewRegistry()
	var relay *pgoutbox.Relay
	app := fxtest.New(t, b.app(t, registerer(reg), fx.Populate(&relay))...)
	app.RequireStart()

	id := b.enqueueTx(t, map[string]string{"to": "ada@example.com"})
	waitUntil(t, "the relay's produced counter to reach 1", func() bool {
		return counter(t, reg, "shareq_relay_produced_total") == 1
	})
	if s := relay.Stats(); s.Produced != 1 || s.Failures != 0 {
		t.Errorf("relay stats %+v, want one produced, no failure", s)
	}
	cl := b.c.Client(t, kgo.ConsumeTopics(b.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	if len(got) != 1 || enqueue.RecordID(got[0]) != id {
		t.Fatalf("records on the topic %v, want the job %s", got, id)
	}
	app.RequireStop()
}

// A missing outbox table fails app.Start, saying what to do.
func TestModuleWithoutTheTableFailsStart(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, false)
	app := fxtest.New(t, b.app(t)...)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "migrations.Up") {
		t.Fatalf("Start without the outbox table = %v, want an error saying to run migrations.Up", err)
	}
}

// A relay that stops by itself shuts the app down with exit code 1. (Run
// fails after its start check only when the relay is already running:
// the test runs it first.)
func TestModuleFailureShutsTheAppDown(t *testing.T) {
	t.Parallel()
	b := setupRelay(t, true)
	var relay *pgoutbox.Relay
	app := fxtest.New(t, b.app(t, fx.Populate(&relay))...)

	// The relay runs before the app starts, and is seen running: it
	// relays a job.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			t.Errorf("the test's Relay.Run: %v", err)
		}
	})
	b.enqueueTx(t, "first")
	waitUntil(t, "the test's relay to relay a job", func() bool { return relay.Stats().Produced == 1 })

	app.RequireStart()
	select {
	case sig := <-app.Wait():
		if sig.ExitCode != 1 {
			t.Errorf("shutdown signal %+v, want exit code 1", sig)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the app was not shut down after its relay failed")
	}
	app.RequireStop()
}
