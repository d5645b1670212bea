package fxrun

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"

	"github.com/shareq/shareq/internal/logbuf"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A component that stops by itself while the app runs is not restarted:
// the app is shut down with exit code 1 and the reason is logged. One that
// returns nil counts as stopped too. (No broker condition makes a worker's
// Run return after it started, so the worker's path is this one with its
// Run; the outbox relay's is tested with a real failure in
// workerfx/outboxfx.)
func TestComponentThatStopsShutsTheAppDown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"failed", errors.New("member gone"), "member gone"},
		{"returned nil", nil, "worker stopped by itself"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs logbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			fail := make(chan struct{})
			app := fxtest.New(t,
				fx.Supply(log),
				fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
					Append(lc, sd, log, Component{
						Pkg:   "workerfx",
						Name:  "worker",
						Check: func(context.Context) error { return nil },
						Run: func(ctx context.Context) error {
							select {
							case <-fail:
								return c.err
							case <-ctx.Done():
								return nil
							}
						},
						TooSlow: "too slow",
					})
				}),
			)
			app.RequireStart()
			close(fail)
			select {
			case sig := <-app.Wait():
				if sig.ExitCode != 1 {
					t.Errorf("exit code %d, want 1", sig.ExitCode)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the app was not shut down within 10s")
			}
			app.RequireStop()
			if got := logs.String(); !strings.Contains(got, "shutting the app down") || !strings.Contains(got, c.want) {
				t.Errorf("log %q does not say why the app is shut down (%q)", got, c.want)
			}
		})
	}
}

// Components that stop together: the first OnStop cancels the Run of
// every component of StopWith, so that they wind down at once. Here each
// Run returns only once all three were cancelled, which one OnStop after
// another could not do.
func TestStopWithStopsTogether(t *testing.T) {
	t.Parallel()
	var handles [3]Handle
	all := []*Handle{&handles[0], &handles[1], &handles[2]}
	var cancelled sync.WaitGroup
	cancelled.Add(len(handles))
	app := fxtest.New(t,
		fx.StopTimeout(10*time.Second),
		fx.Invoke(func(lc fx.Lifecycle, sd fx.Shutdowner) {
			for i := range handles {
				Append(lc, sd, slog.New(slog.DiscardHandler), Component{
					Pkg:   "workerfx",
					Name:  "worker",
					Check: func(context.Context) error { return nil },
					Run: func(ctx context.Context) error {
						<-ctx.Done()
						cancelled.Done()
						cancelled.Wait()
						return nil
					},
					TooSlow:  "too slow",
					Handle:   &handles[i],
					StopWith: all,
				})
			}
		}),
	)
	app.RequireStart()
	app.RequireStop()
}
