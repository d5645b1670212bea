package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/middleware"
	"github.com/shareq/shareq/worker"
)

// A broker that stops answering during the start-up checks, after the
// first (it was SIGKILLed while a worker restarted, as in the soak, where
// a supervisor that retries on ErrBrokersUnreachable then saw an unknown
// error and gave up): Check fails with ErrBrokersUnreachable, not with
// the bare transport error of the step it was at. kfake only: it can
// drop the connection of one kind of request.
func TestBrokersLostDuringChecksAreUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	fake := b.c.Fake()
	if fake == nil {
		t.Skip("needs kfake to drop the topics' Metadata requests")
	}
	fake.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		for _, rt := range req.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == b.topic {
				return nil, errors.New("broker gone"), true // closes the connection
			}
		}
		return nil, nil, false
	})
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop), worker.StartTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Check(context.Background())
	if !errors.Is(err, worker.ErrBrokersUnreachable) {
		t.Fatalf("Check with the broker gone after ApiVersions: %v, want ErrBrokersUnreachable", err)
	}
}

// sizedHandler is a handler (or a middleware's) that holds one of slots
// per running job: a ConcurrencyChecker.
type sizedHandler struct {
	handler.Handler
	slots int
	asked *atomic.Int32
}

func (h sizedHandler) CheckConcurrency(n int) error {
	h.asked.Add(1)
	if n <= h.slots {
		return nil
	}
	return fmt.Errorf("the pool has %d connections for %d jobs at once: set cfg.MaxConns", h.slots, n)
}

// Check asks each handler and middleware layer that is a
// worker.ConcurrencyChecker about the worker's Concurrency, and logs what
// one says is too small once, at Warn level, however many topics share it;
// the worker starts all the same.
func TestCheckWarnsOfResourcesSmallerThanConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	other := b.c.Topic(t, 1)
	var asked atomic.Int32
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	pool := func(next handler.Handler) handler.Handler {
		return sizedHandler{Handler: next, slots: 4, asked: &asked}
	}
	plenty := sizedHandler{Handler: nop, slots: 100, asked: &asked}
	var logs logbuf.Buffer
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Concurrency(10),
		worker.Use(middleware.Logging(nil), pool), // the pool inside another layer
		worker.Handle(b.topic, plenty), worker.Handle(other, nop),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("%d layers asked, want 3 (the pool around each topic's handler, and one handler)", n)
	}
	var warns []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "smaller than the worker's concurrency") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "concurrency=10") || !strings.Contains(warns[0], "the pool has 4 connections for 10 jobs at once: set cfg.MaxConns") {
		t.Fatalf("want one Warn line naming the concurrency and the pool's error; logs:\n%s", logs.String())
	}
}
