package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	shareqconsole "github.com/shareq/shareq/console"
)

// webConsole serves shareq's web console (read-only) while the demo
// runs: the share group, its lag over time, and the corrupt image parked
// in thumbnails.dlq.
type webConsole struct {
	httpServer
	sampler *shareqconsole.Sampler // the lag the group page charts
}

// consoleSampleEvery is how often the demo's console samples the group's
// lag: the demo is short, so more often than a console's default.
const consoleSampleEvery = 2 * time.Second

// startWebConsole listens at addr with a console reading through cl, a
// client that consumes nothing.
func startWebConsole(addr string, cl *kgo.Client, log *slog.Logger) (*webConsole, error) {
	sampler, err := shareqconsole.NewSampler(cl, consoleSampleEvery)
	if err != nil {
		return nil, err
	}
	h, err := shareqconsole.New(shareqconsole.Client(cl), shareqconsole.Charts(sampler), shareqconsole.Logger(log))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-console-addr: %w", err)
	}
	return &webConsole{newHTTPServer(ln, h), sampler}, nil
}

// serve serves the console, sampling the lag meanwhile, until stop.
func (c *webConsole) serve() error {
	ctx, cancel := context.WithCancel(context.Background())
	sampled := make(chan error, 1)
	go func() { sampled <- c.sampler.Run(ctx) }()
	err := c.httpServer.serve()
	cancel()
	return errors.Join(err, <-sampled)
}

// httpServer serves a handler on a listener of its own, until stop: the
// demo's metrics and its web console.
type httpServer struct {
	srv *http.Server
	ln  net.Listener
}

func newHTTPServer(ln net.Listener, h http.Handler) httpServer {
	return httpServer{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
}

// serve serves until stop is called.
func (s *httpServer) serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *httpServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
}
