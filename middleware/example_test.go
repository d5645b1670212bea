package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/middleware"
)

// Timeout bounds a handler's run time; a timed-out job is released and
// tried again.
func ExampleTimeout() {
	timeout := middleware.Timeout(10 * time.Millisecond)
	h := handler.Chain(handler.Func(func(ctx context.Context, job *handler.Job) error {
		select {
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), timeout)
	err := h.Handle(context.Background(), &handler.Job{})
	fmt.Println(handler.ReasonOf(err), handler.IsPermanent(err))
	// Output: timeout false
}

// Logging logs each job with its topic, partition, offset, ID and
// delivery count (never its payload): a failed one at Warn, with the
// error, and a successful one at Debug.
func ExampleLogging() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" { // vary from run to run
				return slog.Attr{}
			}
			return a
		},
	}))
	resize := handler.Chain(handler.Func(func(ctx context.Context, job *handler.Job) error {
		if job.Offset == 8 {
			return errors.New("storage busy")
		}
		return nil
	}), middleware.Logging(log))
	for _, offset := range []int64{7, 8} {
		_ = resize.Handle(context.Background(), &handler.Job{Topic: "images", Offset: offset, DeliveryCount: 1})
	}
	// Output:
	// level=DEBUG msg="job done" topic=images partition=0 offset=7 job_id=images/0/7 delivery=1
	// level=WARN msg="job failed, will retry" topic=images partition=0 offset=8 job_id=images/0/8 delivery=1 error="storage busy"
}

// Recover turns a panic of the handlers inside it into a permanent
// failure with reason "panic": the job is rejected (or parked), and the
// process keeps running.
func ExampleRecover() {
	h := handler.Chain(handler.Func(func(ctx context.Context, job *handler.Job) error {
		var sizes map[string]int
		sizes[job.Topic] = 1 // panics: assignment to entry in nil map
		return nil
	}), middleware.Recover())
	err := h.Handle(context.Background(), &handler.Job{Topic: "images"})
	fmt.Println(handler.ReasonOf(err), handler.IsPermanent(err))
	// Output: panic true
}
