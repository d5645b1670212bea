package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/metrics"
	"github.com/shareq/shareq/worker"
)

// observers sends the worker's events to several observers: the demo's
// tracker and, with -metrics-addr, the Prometheus metrics. The worker takes
// one Observer; this is how to give it more.
type observers []worker.Observer

var _ worker.Observer = observers(nil)

func (obs observers) JobStarted(job *handler.Job) {
	for _, o := range obs {
		o.JobStarted(job)
	}
}

func (obs observers) JobFinished(job *handler.Job, res worker.Result) {
	for _, o := range obs {
		o.JobFinished(job, res)
	}
}

func (obs observers) LockRenewed(job *handler.Job, err error) {
	for _, o := range obs {
		o.LockRenewed(job, err)
	}
}

func (obs observers) AckFailed(topic string, partition int32, err error) {
	for _, o := range obs {
		o.AckFailed(topic, partition, err)
	}
}

// metricsServer serves Prometheus metrics at http://addr/metrics: the
// worker's (shareq_jobs_total and the rest, see the metrics package), the
// share group's lag, and the Go runtime's.
type metricsServer struct {
	httpServer
	m *metrics.Metrics
}

func startMetrics(addr string, adm *kadm.Client, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, metrics.Topics(topic))
	if err != nil {
		return nil, err
	}
	reg.MustRegister(metrics.NewLagCollector(adm, group, metrics.LagTopics(topic), metrics.LagLogger(log)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s := &metricsServer{httpServer: newHTTPServer(ln, mux), m: m}
	return s, nil
}
