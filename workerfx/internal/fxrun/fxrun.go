// Package fxrun ties a long-running component (a worker, an outbox
// relay) to an fx application's lifecycle, for workerfx and
// workerfx/outboxfx.
package fxrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"go.uber.org/fx"
)

// Component is something run for the app's lifetime.
type Component struct {
	Pkg     string // the package the errors come from: "workerfx", "outboxfx"
	Name    string // for errors and logs: "worker", "outbox relay"
	LogArgs []any
	Check   func(context.Context) error // start-up check, in OnStart
	Run     func(context.Context) error // blocks until its context ends
	TooSlow string                      // OnStop's error when Run outlasts the stop timeout
	// Handle, if not nil, is how others stop this Run (see StopWith).
	Handle *Handle
	// StopWith are the Handles of the components that stop together with
	// this one: its OnStop stops them all before it waits for its own
	// Run, so that they wind down at once, within one stop timeout, and
	// not one after another in their own OnStop hooks. Each OnStop still
	// waits for its own Run.
	StopWith []*Handle
}

// Handle stops a component's Run from outside its hooks: from the
// OnStop of another component it stops together with. The zero value is
// ready for Append. Safe for concurrent use.
type Handle struct {
	mu     sync.Mutex
	cancel context.CancelFunc // Run's; nil until OnStart started it
}

// Stop cancels the context of the component's Run, if it has started;
// again, it does nothing more.
func (h *Handle) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
}

func (h *Handle) set(cancel context.CancelFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancel = cancel
}

// Append ties c to the lifecycle. OnStart runs c's Check (a failure fails
// app.Start) and starts c's Run in a goroutine with a context of its own,
// since OnStart's ends with start-up; OnStop cancels it (and the Runs of
// c.StopWith) and waits for it within the stop timeout. A Run that ends
// while the app runs shuts the app down with exit code 1 instead of
// leaving it up without its component. log nil means slog.Default().
func Append(lc fx.Lifecycle, sd fx.Shutdowner, log *slog.Logger, c Component) {
	if log == nil {
		log = slog.Default()
	}
	h := c.Handle
	if h == nil {
		h = new(Handle)
	}
	var done chan error // Run's error, or nil once the failure was reported
	lc.Append(fx.Hook{
		OnStart: func(startCtx context.Context) error {
			if err := c.Check(startCtx); err != nil {
				return fmt.Errorf("%s: %s: %w", c.Pkg, c.Name, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			h.set(cancel)
			done = make(chan error, 1)
			go func() {
				err := c.Run(ctx)
				if ctx.Err() != nil { // stopping: OnStop reports err
					done <- err
					return
				}
				if err == nil {
					err = errors.New(c.Name + " stopped by itself")
				}
				log.Error("shareq: "+c.Name+" failed; shutting the app down", append(slices.Clone(c.LogArgs), "error", err)...)
				if serr := sd.Shutdown(fx.ExitCode(1)); serr != nil {
					log.Error("shareq: shutting the app down", "error", serr)
				}
				done <- nil
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			for _, other := range c.StopWith {
				other.Stop()
			}
			h.Stop()
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("%s: %s: %w", c.Pkg, c.Name, err)
				}
				return nil
			case <-ctx.Done():
				return fmt.Errorf("%s: %s: %w", c.Pkg, c.TooSlow, ctx.Err())
			}
		},
	})
}
