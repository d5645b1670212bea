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
// runs: the share group, its lag, and the corrupt image parked in
// thumbnails.dlq.
type webConsole struct {
	srv *http.Server
	ln  net.Listener
}

// startWebConsole listens at addr with a console reading through cl, a
// client that consumes nothing.
func startWebConsole(addr string, cl *kgo.Client, log *slog.Logger) (*webConsole, error) {
	h, err := shareqconsole.New(shareqconsole.Client(cl), shareqconsole.Logger(log))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-console-addr: %w", err)
	}
	return &webConsole{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// serve serves until stop is called.
func (c *webConsole) serve() error {
	if err := c.srv.Serve(c.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (c *webConsole) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
}
