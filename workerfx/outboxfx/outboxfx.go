package outboxfx

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/metrics/outboxmetrics"
	"github.com/shareq/shareq/workerfx/internal/fxrun"
)

// ProduceTimeoutDefault is the relay's produce timeout when
// [Config.Options] sets none. It is shorter than pgoutbox's own
// default so that a stopping relay, which finishes the round in
// progress, fits in fx's default stop timeout (15 s) even when the broker
// does not answer.
const ProduceTimeoutDefault = 10 * time.Second

// Module runs a transactional outbox relay (package
// enqueue/pgoutbox) for the life of an fx application. It needs the app's
// *pgxpool.Pool and *kgo.Client (it closes neither; the client must be
// created with enqueue.ProducerOpts, see pgoutbox.NewRelay) and provides the
// *pgoutbox.Relay, built by [NewRelay]. A [Config] is optional.
//
// When the app provides a prometheus.Registerer, the relay's metrics
// (outboxmetrics.NewCollector) are registered with it. It uses an
// *slog.Logger when the app provides one (else slog.Default()).
//
// On start it checks that the outbox table is readable (a missing table
// fails app.Start with an error saying to run migrations.Up), then runs
// the relay in a goroutine with a context of its own. If the relay stops
// by itself, the error is logged and the app is shut down with exit code
// 1. On stop it cancels the relay and waits for it to finish its round in
// progress, up to fx's stop timeout.
//
// It may be used with workerfx.Module in one app, or alone in an app that
// only relays.
var Module = fx.Module("shareq.relay",
	fx.Provide(NewRelay),
	fx.Invoke(runRelay),
)

// Config configures the relay of [Module]. Supplying one is optional.
type Config struct {
	// Options are pgoutbox relay options (BatchSize, PollInterval,
	// RetryBackoff, ...), applied after the module's own (the app's
	// logger and [ProduceTimeoutDefault]), so they win.
	Options []pgoutbox.RelayOption
	// MetricsOptions configure the relay's collector:
	// outboxmetrics.ConstLabels, outboxmetrics.MinInterval, ...
	MetricsOptions []outboxmetrics.Option
}

// Params are the inputs of [NewRelay].
type Params struct {
	fx.In

	Pool   *pgxpool.Pool
	Client *kgo.Client
	Config Config `optional:"true"`
	// Registerer, when the app provides one, gets the relay's metrics.
	Registerer prometheus.Registerer `optional:"true"`
	Logger     *slog.Logger          `optional:"true"`
}

// Result is the output of [NewRelay].
type Result struct {
	fx.Out

	Relay *pgoutbox.Relay
}

// NewRelay builds the relay from the app's pool and client, and registers
// its metrics with the app's registerer when there is one. It returns
// pgoutbox.NewRelay's error for invalid options, and the registerer's.
func NewRelay(p Params) (Result, error) {
	log := p.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := append([]pgoutbox.RelayOption{pgoutbox.Logger(log), pgoutbox.ProduceTimeout(ProduceTimeoutDefault)}, p.Config.Options...)
	r, err := pgoutbox.NewRelay(p.Pool, p.Client, opts...)
	if err != nil {
		return Result{}, fmt.Errorf("outboxfx: %w", err)
	}
	if p.Registerer != nil {
		mopts := append([]outboxmetrics.Option{outboxmetrics.Logger(log)}, p.Config.MetricsOptions...)
		if err := p.Registerer.Register(outboxmetrics.NewCollector(r, mopts...)); err != nil {
			return Result{}, fmt.Errorf("outboxfx: register the relay's metrics: %w", err)
		}
	}
	return Result{Relay: r}, nil
}

type relayRunParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Relay      *pgoutbox.Relay
	Logger     *slog.Logger `optional:"true"`
}

// runRelay ties the relay to the app's lifecycle.
func runRelay(p relayRunParams) {
	fxrun.Append(p.Lifecycle, p.Shutdowner, p.Logger, fxrun.Component{
		Pkg:     "outboxfx",
		Name:    "outbox relay",
		Check:   p.Relay.Check,
		Run:     p.Relay.Run,
		TooSlow: "the outbox relay did not finish its round within the app's stop timeout (raise fx.StopTimeout or lower pgoutbox.ProduceTimeout)",
	})
}
