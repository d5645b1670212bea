package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/middleware"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/worker"
)

// safeJobs is docs/idempotency.md's "Safe jobs" section: a worker with the claim
// row, dead-letter parking and metrics.
func safeJobs(ctx context.Context, resize handler.Handler) error {
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL")) // the claim rows live here
	if err != nil {
		return err
	}
	// A connection per running job's claim (worker.ConcurrencyDefault, 10) and
	// some for the handlers' own queries: see "The connection pool" below.
	cfg.MaxConns = int32(worker.ConcurrencyDefault) + 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, pool); err != nil { // creates shareq_processed_jobs
		return err
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:9092")) // writes to the DLQ topics
	if err != nil {
		return err
	}
	defer producer.Close()

	m, err := metrics.New(prometheus.DefaultRegisterer)
	if err != nil {
		return err
	}
	store, err := pgstore.New(pool)
	if err != nil {
		return err
	}
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(m.Duplicate))
	if err != nil {
		return err
	}
	park, err := dlq.Middleware(producer) // parks in <topic>.dlq
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers("127.0.0.1:9092"),
		worker.Group("thumbnails"),
		worker.Handle("images", resize, park, middleware.Logging(nil), claims),
		worker.RequireTopics("images.dlq"), // refuse to start without the DLQ topic
		worker.Observers(m),
	)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// secured is RELIABILITY.md's "Kafka TLS and SASL": the same options for
// the worker's clients and the client that parks jobs.
func secured(ctx context.Context, roots *x509.CertPool, user, pass string, brokers []string, claims handler.Middleware, resize handler.Handler) error {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	auth := scram.Auth{User: user, Pass: pass}.AsSha512Mechanism() // github.com/twmb/franz-go/pkg/sasl/scram
	opts := []kgo.Opt{kgo.DialTLSConfig(tlsCfg), kgo.SASL(auth)}

	dlqClient, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return err
	}
	defer dlqClient.Close()
	park, err := dlq.Middleware(dlqClient)
	if err != nil {
		return err
	}
	w, err := worker.New(
		worker.Brokers(brokers...),
		worker.ClientOpts(opts...),
		worker.Group("thumbnails"),
		worker.Use(park, claims),
		worker.Handle("images", resize),
	)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// mutualTLS is docs/security.md's mTLS connection: the worker's principal
// is its client certificate's name.
func mutualTLS(ctx context.Context, caPEM []byte, brokers []string, send handler.Handler) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate in caPEM")
	}
	cert, err := tls.LoadX509KeyPair("client.pem", "client-key.pem")
	if err != nil {
		return err
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{cert}}
	w, err := worker.New(
		worker.Brokers(brokers...),
		worker.ClientOpts(kgo.DialTLSConfig(tlsCfg)),
		worker.Group("emails"),
		worker.Handle("emails", send),
	)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
