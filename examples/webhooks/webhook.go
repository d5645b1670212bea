package main

// This file is the part to copy: a webhook delivery handler and the worker
// options that protect the customers' endpoints from each other. It knows
// nothing about the demo's broker or its fake endpoints; see run.go for
// the wiring.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Webhook is one event to deliver to a customer's endpoint: the job's
// JSON value.
type Webhook struct {
	ID    string          `json:"id"`    // the event's ID, sent as the Webhook-Id header
	URL   string          `json:"url"`   // the customer's endpoint
	Event string          `json:"event"` // the event type, e.g. "order.paid"
	Body  json.RawMessage `json:"body"`  // what to POST
}

// Settings of the delivery.
const (
	// perHost is how many deliveries to one host run at once in a worker:
	// a slow customer takes at most this many handler slots.
	perHost = 2
	// breakAfter opens a host's breaker after this many failures in a
	// row (timeouts, resets), besides every handler.KeyUnavailable.
	breakAfter = 3
	// retryAfterMax caps a Retry-After the worker honours: a longer one
	// is taken as this.
	retryAfterMax = time.Hour
)

// webhookOptions are the worker options for webhook jobs on topic: the
// handler, parking of the ones that cannot succeed, and a limit per
// host. p produces the parked jobs (the application's *kgo.Client).
func webhookOptions(topic string, s *Sender, p dlq.Producer) ([]worker.Option, error) {
	park, err := dlq.Middleware(p) // a 4xx: the job is parked in <topic>.dlq
	if err != nil {
		return nil, err
	}
	return []worker.Option{
		worker.Handle(topic, handler.JSON(s.Deliver), park),
		worker.KeyLimit(topic, worker.Keys{
			Key:         Host,       // the webhook's host: each customer's endpoint is limited apart
			Concurrency: perHost,    // deliveries to one host at once, in this worker
			BreakAfter:  breakAfter, // failures in a row that open the host's breaker
		}),
	}, nil
}

// Host is the limit key of a webhook job: the host (and port) of its URL;
// "" (no limit) for a job whose value is not a webhook, which its handler
// then parks.
func Host(job *handler.Job) string {
	var w struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(job.Value, &w) != nil {
		return ""
	}
	u, err := url.Parse(w.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// Sender delivers webhooks over HTTP. Safe for concurrent use.
type Sender struct {
	// Client sends the requests; its Timeout bounds one delivery.
	Client *http.Client
}

// Deliver POSTs w to its URL and says what the answer means for the job:
//
//	2xx                                   nil: delivered
//	429 Too Many Requests                 handler.Snooze(Retry-After): again then, no delivery spent
//	other 4xx                             handler.Permanent: parked, never retried
//	5xx, connection refused               handler.KeyUnavailable: the host's breaker opens; its jobs wait
//	timeout, reset, other network error   an error: retried; breakAfter in a row open the breaker
func (s *Sender) Deliver(ctx context.Context, job *handler.Job, w Webhook) error {
	u, err := url.Parse(w.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return handler.Permanent(fmt.Errorf("webhook %s: bad URL %q", w.ID, w.URL))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(w.Body))
	if err != nil {
		return handler.Permanent(fmt.Errorf("webhook %s: %w", w.ID, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Id", w.ID)
	req.Header.Set("Webhook-Event", w.Event)
	resp, err := s.Client.Do(req)
	if err != nil {
		return sendFailed(w, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	return answered(w, u.Host, resp, time.Now())
}

// sendFailed is the outcome of a request that got no answer.
func sendFailed(w Webhook, err error) error {
	var op interface{ Timeout() bool }
	switch {
	case errors.As(err, &op) && op.Timeout():
		return fmt.Errorf("webhook %s: no answer in time: %w", w.ID, err)
	case isRefused(err):
		return handler.KeyUnavailable(fmt.Errorf("webhook %s: %w", w.ID, err))
	}
	return fmt.Errorf("webhook %s: %w", w.ID, err)
}

// isRefused reports whether err says nothing listens at the endpoint.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// answered is the outcome of host's answer, received at now.
func answered(w Webhook, host string, resp *http.Response, now time.Time) error {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests:
		return handler.Snooze(retryAfter(resp.Header.Get("Retry-After"), now))
	case code >= 500:
		return handler.KeyUnavailable(fmt.Errorf("webhook %s: %s answered %s", w.ID, host, resp.Status))
	}
	return handler.Permanent(fmt.Errorf("webhook %s: %s answered %s", w.ID, host, resp.Status))
}

// retryAfter reads a Retry-After header, in seconds or an HTTP date, as
// a wait from now: a second when it is absent or unreadable, at most
// retryAfterMax.
func retryAfter(v string, now time.Time) time.Duration {
	d := time.Second
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), retryAfterMax)
}
