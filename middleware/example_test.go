package middleware_test

import (
	"context"
	"fmt"
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
