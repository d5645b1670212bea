package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/shareq/shareq/internal/procstat"
)

// The churn scenario (only when named: -scenarios churn) measures what a
// group's members joining and leaving cost the group coordinator, with
// the worker's AssignmentInterval (100 ms) and with AssignmentInterval(0)
// (Kafka's 1 s): churnWorkers worker processes on one idle topic of 60
// partitions, and for churnFor (half with -quick), every churnEvery, the
// oldest stops and a new one starts (each lives about 10 s). It reports, for
// each kind, the heartbeats per second of all the processes together
// (what the coordinator answers), the joins and leaves per second, and,
// when $SHAREQ_BENCH_BROKER_PID names the broker's process (a local
// broker: scripts/kafka.sh writes its pid to .cache/kafka.pid), the
// broker's CPU per second over the same span. kfake is left out: it has
// no assignment interval.
const (
	churnWorkers = 20
	churnFor     = 30 * time.Second
	churnParts   = 60
	churnEvery   = 500 * time.Millisecond
)

// churnBrokerPIDEnv names the broker process whose CPU the churn
// scenario reads.
const churnBrokerPIDEnv = "SHAREQ_BENCH_BROKER_PID"

func runChurn(ctx context.Context, c *cluster, log *slog.Logger, quick bool,
	add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	if c.kind == "kfake" {
		progress("churn: skipped on kfake (no assignment interval)")
		return nil
	}
	span := churnFor
	if quick {
		span /= 2
	}
	topic, err := c.topic(ctx, "churn", churnParts)
	if err != nil {
		return err
	}
	pid := os.Getenv(churnBrokerPIDEnv)
	var errs []error
	for _, kind := range scaleStartKinds {
		variant := fmt.Sprintf("churn, %d workers on %d partitions%s", churnWorkers, churnParts, kind.suffix)
		progress(variant)
		if err := churnOnce(ctx, c, log, topic, span, pid, kind.args, variant, add); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", variant, err))
		}
	}
	return errors.Join(errs...)
}

// churnOnce runs one kind of worker (its extra flags args) through the
// churn in a new group and reports it as variant.
func churnOnce(ctx context.Context, c *cluster, log *slog.Logger, topic string, span time.Duration, pid string, args []string, variant string,
	add func(variant, metric string, v float64, unit, note string)) (err error) {
	group, err := c.shareGroup(ctx, "churn")
	if err != nil {
		return err
	}
	var live, gone []*scaleProcs
	defer func() {
		for _, ps := range live {
			err = errors.Join(err, ps.stop(log))
		}
	}()
	start := func() error {
		ps, err := startScaleWorkers(1, c.seeds, group, []string{topic}, scaleConcurrency, false, args...)
		if ps != nil && len(ps.procs) > 0 {
			live = append(live, ps)
		}
		return err
	}
	for range churnWorkers {
		if err := start(); err != nil {
			return err
		}
	}
	if err := c.waitShareMembers(ctx, group, churnWorkers); err != nil {
		return err
	}
	beats := func() int64 {
		var n int64
		for _, ps := range append(append([]*scaleProcs{}, gone...), live...) {
			n += ps.snapshot().reqs["ShareGroupHeartbeat"]
		}
		return n
	}
	b0, cpu0, t0 := beats(), brokerCPU(pid), time.Now()
	changes := 0
	tick := time.NewTicker(churnEvery)
	defer tick.Stop()
	for time.Since(t0) < span && ctx.Err() == nil {
		<-tick.C
		old := live[0]
		live = live[1:]
		gone = append(gone, old)
		if err := old.stop(log); err != nil {
			return err
		}
		if err := start(); err != nil {
			return err
		}
		changes++
	}
	elapsed := time.Since(t0)
	b1, cpu1 := beats(), brokerCPU(pid)
	add(variant, "heartbeats_per_s", float64(b1-b0)/elapsed.Seconds(), "req/s",
		fmt.Sprintf("ShareGroupHeartbeats of all the worker processes over %v, while one left and another joined %d times", elapsed.Round(time.Second), changes))
	add(variant, "changes_per_s", float64(changes)/elapsed.Seconds(), "/s", "a worker leaving and another joining")
	if cpu0 >= 0 && cpu1 >= 0 {
		add(variant, "broker_cpu_per_s", millis(cpu1-cpu0)/elapsed.Seconds(), "ms/s",
			"the broker process's user + system CPU ($"+churnBrokerPIDEnv+"; the machine's other load included)")
	}
	return nil
}

// brokerCPU returns the user + system CPU time of process pid so far
// (/proc/PID/stat), or −1 when pid is empty or unreadable.
func brokerCPU(pid string) time.Duration {
	n, err := strconv.Atoi(pid)
	if err != nil {
		return -1
	}
	cpu, err := procstat.CPU(n)
	if err != nil {
		return -1
	}
	return cpu
}
