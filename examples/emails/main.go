// Command emails is the worker of docs/rate-limits.md's "The email case": it
// sends the jobs of the topic "emails" at most 14 a second (Amazon SES's
// starting quota) across every process that runs it, on a broker at
// localhost:9092. send stands in for the SES call.
//
// internal/doccheck fails when the doc's snippet and this file drift
// apart: change them together.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Email is one message to send.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := worker.New(
		worker.Brokers("localhost:9092"),
		worker.Group("emails"),
		worker.AutoOffsetReset("earliest"), // a new group starts at the jobs already enqueued
		worker.Handle("emails", handler.JSON(func(ctx context.Context, _ *handler.Job, e Email) error {
			return send(ctx, e) // the SES call
		})),
		worker.TopicRate("emails", 14, time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// send sends e; an error is retried after the worker's backoff.
func send(ctx context.Context, e Email) error {
	log.Printf("to %s: %s", e.To, e.Subject)
	return ctx.Err()
}
