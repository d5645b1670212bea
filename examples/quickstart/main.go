// Command quickstart is the worker of README.md's "A worker" section, with
// other snippets of the docs compiled beside it (readme_test.go): a thumbnail
// worker for the topic "images" on a broker at 127.0.0.1:9092, such as the
// one "go run ./cmd/shareq dev -topics images" starts.
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
		worker.Brokers("127.0.0.1:9092"),
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
