// Command quickstart is the worker of README.md's "A worker" section, with
// other snippets of the docs compiled beside it (readme_test.go): a thumbnail
// worker for the topic "images" on the brokers $SHAREQ_BROKERS names
// (comma-separated), else on 127.0.0.1:9092, where
// "go run ./cmd/shareq dev -topics images" starts one. It runs until
// interrupted (Ctrl-C, SIGTERM), then stops gracefully and exits 0.
//
// The release check (internal/cmd/releasecheck) builds it as a user
// would, runs it against an in-process broker, enqueues a job, waits for
// its "thumbnail made" line and interrupts it.
//
// internal/doccheck fails when the docs' snippets and these files drift
// apart: change them together.
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/middleware"
	"github.com/shareq/shareq/worker"
)

type Resize struct {
	ImageID string `json:"image_id"`
	Width   int    `json:"width"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	resize := handler.JSON(func(ctx context.Context, job *handler.Job, r Resize) error {
		if r.Width <= 0 {
			return handler.Permanent(fmt.Errorf("width %d", r.Width)) // never retried
		}
		return makeThumbnail(ctx, r) // an error here is retried
	})
	w, err := worker.New(
		worker.Brokers(brokers()...), // $SHAREQ_BROKERS, else 127.0.0.1:9092
		worker.Group("thumbnails"),
		worker.Handle("images", resize, middleware.Logging(nil)),
		worker.Concurrency(16),
		worker.AutoOffsetReset("earliest"),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // blocks; Ctrl-C stops gracefully
		log.Fatal(err)
	}
}

// makeThumbnail stands in for the real work: it logs the job.
func makeThumbnail(ctx context.Context, r Resize) error {
	slog.InfoContext(ctx, "thumbnail made", "image_id", r.ImageID, "width", r.Width)
	return nil
}

// brokers returns the seed brokers of $SHAREQ_BROKERS (comma-separated),
// the variable the shareq CLI reads too, else 127.0.0.1:9092.
func brokers() []string {
	if v := os.Getenv("SHAREQ_BROKERS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"127.0.0.1:9092"}
}
