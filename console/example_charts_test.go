package console_test

import (
	"context"
	"errors"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/console"
)

// serveWithCharts serves the console with its charts until ctx ends:
// the sampler runs as long as the server, and both stop together.
func serveWithCharts(ctx context.Context, cl *kgo.Client) error {
	sm, err := console.NewSampler(cl, 0) // every 10 s
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	go func() { sampled <- sm.Run(ctx) }()
	defer func() { cancel(); <-sampled }() // the sampler stops with the server
	ops, err := console.New(console.Client(cl), console.Charts(sm))
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: "127.0.0.1:8080", Handler: ops}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// The console with its charts: a Sampler samples every share group's lag
// and oldest job for the group charts, for as long as the server runs.
func ExampleNewSampler() {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092"))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := serveWithCharts(ctx, cl); err != nil {
		panic(err)
	}
}
