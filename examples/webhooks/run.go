package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/worker"
)

// The topic, its partitions and the share group of the demo.
const (
	topic      = "webhooks"
	partitions = 3
	group      = "webhook-delivery"
	dlqTopic   = topic + dlq.TopicSuffix
)

// run is the whole program: the broker, the endpoints, the webhooks, the
// worker, and the summary once every webhook has ended. It returns an
// error when a step failed or not every webhook ended in time.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (Summary, error) {
	var sum Summary
	if err := cfg.check(); err != nil {
		return sum, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// Info: the breaker's lines (one Warn when a host goes down, one Info
	// when it is back) are what an operator sees.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// 1. A broker in this process (franz-go's kfake, what shareq dev runs),
	// with the webhooks topic and its DLQ topic.
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic, dlqTopic))
	if err != nil {
		return sum, err
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()
	fmt.Fprintf(stdout, "started an in-process Kafka broker (kfake) on %s\n", strings.Join(brokers, ","))
	cl, err := kgo.NewClient(append(enqueue.ProducerOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return sum, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	// 2. The customers' endpoints.
	eps, err := startEndpoints()
	defer func() {
		for _, e := range eps {
			e.close()
		}
	}()
	if err != nil {
		return sum, err
	}
	for _, e := range eps {
		fmt.Fprintf(stdout, "endpoint %-8s %s (%s)\n", e.name, e.url, e.behaviour)
	}

	// 3. The webhooks, the endpoints' interleaved.
	if err := enqueueWebhooks(ctx, cl, eps, cfg.PerEndpoint); err != nil {
		return sum, err
	}
	total := len(eps) * cfg.PerEndpoint
	fmt.Fprintf(stdout, "enqueued %d webhooks on %s, %d per endpoint\n", total, topic, cfg.PerEndpoint)

	// 4. The worker.
	t := newTally()
	sender := &Sender{Client: &http.Client{Timeout: cfg.HTTPTimeout}}
	opts, err := webhookOptions(topic, sender, cl)
	if err != nil {
		return sum, err
	}
	w, err := worker.New(append(opts,
		worker.Brokers(brokers...),
		worker.Group(group),
		worker.Use(t.Middleware),
		worker.Concurrency(cfg.Concurrency),
		worker.AutoOffsetReset("earliest"),
		worker.Observers(t),
		worker.Logger(log),
	)...)
	if err != nil {
		return sum, err
	}
	started := time.Now()
	wctx, stopWorker := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWorker()
	workerErr := make(chan error, 1)
	wg.Go(func() { workerErr <- w.Run(wctx) })

	// 5. Wait for every webhook to end; the down endpoint comes back
	// cfg.DownFor after its breaker opened.
	back := time.NewTimer(time.Hour)
	back.Stop()
	defer back.Stop()
	for t.ended() < total {
		select {
		case <-t.changed:
		case host := <-t.down:
			if host == eps[downIndex].host {
				back.Reset(cfg.DownFor)
			}
		case <-back.C:
			if err := eps[downIndex].comeBack(); err != nil {
				return sum, err
			}
			fmt.Fprintf(stdout, "endpoint %s is back, %v after its breaker opened\n", eps[downIndex].name, cfg.DownFor)
		case err := <-workerErr:
			// Run returns before its context is cancelled only when it
			// could not start.
			return sum, fmt.Errorf("worker stopped: %v", err)
		case <-ctx.Done():
			return sum, fmt.Errorf("%d of %d webhooks ended within -timeout %v", t.ended(), total, cfg.Timeout)
		}
	}
	sum.Took = time.Since(started)
	stopWorker()
	if err := <-workerErr; err != nil {
		return sum, fmt.Errorf("worker: %w", err)
	}
	for _, e := range eps {
		sum.Destinations = append(sum.Destinations, t.destination(e, cfg.PerEndpoint))
	}
	sum.print(stdout)
	return sum, nil
}

// The endpoints of the demo, in this order; downIndex is the one that is
// down at first.
const downIndex = 2

// startEndpoints starts the demo's endpoints: two healthy shops, one
// down until it comes back, one that answers 429 first, one gone. On an
// error it returns those it started, to close.
func startEndpoints() ([]*endpoint, error) {
	var eps []*endpoint
	for _, s := range []struct {
		name string
		b    behaviour
	}{{"shop-a", healthy}, {"shop-b", healthy}, {"shop-c", down}, {"shop-d", rateLimited}, {"shop-e", gone}} {
		e, err := startEndpoint(s.name, s.b)
		if err != nil {
			return eps, fmt.Errorf("endpoint %s: %w", s.name, err)
		}
		eps = append(eps, e)
	}
	if eps[downIndex].behaviour != down {
		return eps, errors.New("downIndex is not the down endpoint")
	}
	return eps, nil
}

// enqueueWebhooks enqueues n webhooks for each endpoint, interleaved: one
// of each, then the next.
func enqueueWebhooks(ctx context.Context, cl *kgo.Client, eps []*endpoint, n int) error {
	q, err := enqueue.New(cl)
	if err != nil {
		return err
	}
	var jobs []enqueue.Job
	for i := range n {
		for _, e := range eps {
			id := fmt.Sprintf("evt-%s-%03d", e.name, i)
			body, _ := json.Marshal(map[string]any{"order": i, "shop": e.name})
			wh := Webhook{ID: id, URL: e.url, Event: "order.paid", Body: body}
			jobs = append(jobs, enqueue.NewJob(topic, wh, enqueue.ID(id)))
		}
	}
	_, err = q.EnqueueMany(ctx, jobs...)
	return err
}
