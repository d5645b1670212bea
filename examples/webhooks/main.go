// Command webhooks is a webhook delivery worker that keeps one customer's
// endpoint from hurting the others' deliveries, with shareq's key limits:
//
//   - per-host concurrency (worker.KeyLimit with the webhook's host as the
//     key): a slow endpoint takes at most two handler slots; its other
//     jobs wait without one, their locks renewed, spending no delivery;
//   - a breaker per host: connection refused or a 5xx is
//     handler.KeyUnavailable, which opens the host's breaker; its jobs wait
//     while one of them probes the host now and then, and run when it is
//     back, on the delivery they had; the other hosts' jobs run on;
//   - a 429 snoozes the job until its Retry-After (handler.Snooze), with
//     no delivery spent;
//   - another 4xx is permanent: the dlq middleware parks the job;
//   - an HTTP timeout bounds each delivery; a timeout is retried, and
//     three failures of a host in a row open its breaker too.
//
// It needs nothing installed: it starts an in-process Kafka broker and
// five fake customer endpoints on 127.0.0.1 (two healthy, one down for
// a few seconds, one answering 429 first, one gone), enqueues webhooks
// for them, works them off and prints what happened to each endpoint's:
//
//	go run ./examples/webhooks
//
// The files:
//
//	webhook.go    the part to copy: the handler, what each answer means, the worker options
//	run.go        the wiring: broker, endpoints, webhooks, worker, waiting for every webhook
//	endpoints.go  the fake customer endpoints
//	tally.go      what happened to each endpoint's webhooks, and the summary
//	main.go       flags
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	PerEndpoint int           // webhooks enqueued for each endpoint
	Concurrency int           // the worker's handler slots
	HTTPTimeout time.Duration // bound on one delivery
	DownFor     time.Duration // how long the down endpoint stays down after its breaker opens
	Timeout     time.Duration // bound on the whole run
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("webhooks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.PerEndpoint, "webhooks", 8, "webhooks to enqueue for each endpoint")
	fs.IntVar(&cfg.Concurrency, "concurrency", 4, "the worker's handler slots")
	fs.DurationVar(&cfg.HTTPTimeout, "http-timeout", 5*time.Second, "give up on one delivery after this long")
	fs.DurationVar(&cfg.DownFor, "down-for", 2*time.Second, "how long the down endpoint stays down after its breaker opens")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.check()
}

// check reports a setting that cannot work.
func (c config) check() error {
	switch {
	case c.PerEndpoint < 1:
		return fmt.Errorf("-webhooks %d: want at least 1", c.PerEndpoint)
	case c.Concurrency < 1:
		return fmt.Errorf("-concurrency %d: want at least 1", c.Concurrency)
	case c.HTTPTimeout <= 0 || c.DownFor < 0 || c.Timeout <= 0:
		return fmt.Errorf("-http-timeout %v, -down-for %v, -timeout %v: want positive durations", c.HTTPTimeout, c.DownFor, c.Timeout)
	}
	return nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhooks:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "webhooks:", err)
		os.Exit(1)
	}
}
