package shareqotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The instruments, in the names of the messaging conventions where they
// have one.
const (
	// MetricProcessDuration is the conventions' histogram of how long a
	// handler ran, in seconds, per topic, group and, for a failure (a
	// parked job's included), error.type.
	MetricProcessDuration = "messaging.process.duration"
	// MetricConsumed counts finished deliveries, per topic, group,
	// outcome and error.type (the conventions'
	// messaging.client.consumed.messages, with shareq's outcome).
	MetricConsumed = "messaging.client.consumed.messages"
	// MetricWait is the histogram of the wait of a job's first delivery
	// from its record's timestamp (when it was produced: for an outbox job,
	// when the relay produced it) to its handler's start, in seconds.
	MetricWait = "shareq.job.wait"
)

type instruments struct {
	duration metric.Float64Histogram
	wait     metric.Float64Histogram
	// series holds a *series per seriesKey, so that a measurement costs
	// no allocation once its series exists. The consumed counter is
	// asynchronous: a finished job adds to its series' count, and a
	// collection reads the counts.
	bySeries sync.Map
}

type seriesKey struct{ topic, group, outcome, errType string }

// series is one combination of attributes.
type series struct {
	set attribute.Set
	// opts holds the set as a record option, made once: a slice passed
	// on to Record costs no allocation.
	opts     []metric.RecordOption
	consumed atomic.Int64
}

// durationBuckets are the boundaries the conventions advise for
// messaging.process.duration.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

func (in *instruments) init(m metric.Meter) error {
	var err error
	if in.duration, err = m.Float64Histogram(MetricProcessDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of processing operation."), metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return err
	}
	if _, err = m.Int64ObservableCounter(MetricConsumed, metric.WithUnit("{message}"),
		metric.WithDescription("Number of messages that were delivered to the application."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			in.bySeries.Range(func(_, v any) bool {
				if se := v.(*series); se.consumed.Load() > 0 {
					o.Observe(se.consumed.Load(), metric.WithAttributeSet(se.set))
				}
				return true
			})
			return nil
		})); err != nil {
		return err
	}
	in.wait, err = m.Float64Histogram(MetricWait, metric.WithUnit("s"),
		metric.WithDescription("Wait of a job's first delivery from its enqueue to its handler's start."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	return err
}

func (in *instruments) series(k seriesKey) *series {
	if v, ok := in.bySeries.Load(k); ok {
		return v.(*series)
	}
	as := []attribute.KeyValue{systemKafka, attrOperationName.String("process"), attrDestination.String(k.topic), attrGroup.String(k.group)}
	if k.outcome != "" {
		as = append(as, attrOutcome.String(k.outcome))
	}
	if k.errType != "" {
		as = append(as, attrErrorType.String(k.errType))
	}
	se := &series{set: attribute.NewSet(as...)}
	se.opts = []metric.RecordOption{metric.WithAttributeSet(se.set)}
	v, _ := in.bySeries.LoadOrStore(k, se)
	return v.(*series)
}
