package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/shareq/shareq/internal/fleet"
)

// idleTopicParts is the partitions of the idle scenario's topic.
const idleTopicParts = 60

// idleSpan is how long the idle scenario counts an idle worker's
// requests: several status intervals (fleet.EveryDefault).
func idleSpan(quick bool) time.Duration {
	if quick {
		return 10 * time.Second
	}
	return 30 * time.Second
}

// runIdle measures an idle worker process on one topic of
// idleTopicParts partitions (no records) over idleSpan, its requests
// per second by name and its CPU: without its status (StatusTopic("")),
// then publishing to a status topic of its own, then following a control
// topic of its own (BENCHMARKS.md section 9, "The workers' status"); the
// other two without the control topic (ControlTopic("")).
func runIdle(ctx context.Context, c *cluster, log *slog.Logger, quick bool,
	add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	topic, err := c.topic(ctx, "idle", idleTopicParts)
	if err != nil {
		return err
	}
	status, err := c.topic(ctx, "workers", 1) // the configs do not change what a worker sends
	if err != nil {
		return err
	}
	controls, err := c.topic(ctx, "controls", 1)
	if err != nil {
		return err
	}
	sz := scaleSizes{idle: idleSpan(quick)}
	var errs []error
	for _, v := range []struct{ name, status, controls string }{
		{"without status", "", ""}, {"with status", status, ""}, {"with controls", "", controls},
	} {
		progress("idle: " + v.name)
		errs = append(errs, idleOnce(ctx, c, log, topic, v.status, v.controls, sz, v.name, add))
	}
	return errors.Join(errs...)
}

// idleOnce starts one worker process on topic in a new group, waits
// until it joined, and measures it idle.
func idleOnce(ctx context.Context, c *cluster, log *slog.Logger, topic, status, controls string, sz scaleSizes, variant string,
	add func(variant, metric string, v float64, unit, note string)) (err error) {
	group, err := c.shareGroup(ctx, "idle")
	if err != nil {
		return err
	}
	ps, err := startScaleWorkers(1, c.seeds, group, []string{topic}, scaleConcurrency, false, "-status-topic", status, "-control-topic", controls)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ps.stop(log)) }()
	if err := c.waitShareMembers(ctx, group, 1); err != nil {
		return err
	}
	if err := scaleIdle(ctx, ps, sz, variant, add); err != nil {
		return fmt.Errorf("%s: %w", variant, err)
	}
	add("idle, "+variant, "status_every", fleet.EveryDefault.Seconds(), "s", "the worker's status interval (when it publishes)")
	return nil
}
