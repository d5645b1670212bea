package shareqotel

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// run is one job run: from JobStarted (or the middleware, without the
// observer) to JobFinished. The middleware sets span on the handler's
// goroutine; JobFinished and LockRenewed read it on the worker's, also
// while the handler still runs (a job released at its lock's end), hence
// the mutex.
type run struct {
	// Context is the handler's context of the run's first run, which r
	// itself then stands for (see Value). Only the middleware, on the
	// handler's goroutine, sets it, before it hands r on.
	context.Context

	mu   sync.Mutex
	span trace.Span
	job  *handler.Job // set with span
	base *runBase     // set with span
	// measured: the middleware recorded the handler chain's duration (a
	// panic that passed through it did not let it).
	measured bool
}

func (r *run) current() trace.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.span
}

type runKey struct{}

// Value makes a run the context of its first run's handler: it holds
// the run under runKey.
func (r *run) Value(key any) any {
	if key == (runKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// runFrom returns the run ctx is inside of, or nil.
func runFrom(ctx context.Context) *run {
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// Middleware returns the handler middleware that gives each job run a
// CONSUMER span "process <topic>", a child of the context the job's
// headers carry (its enqueue's span), and linked to it (only linked, in a
// trace of its own, with [LinkToJob]) and, for a replayed job, to the run
// that parked it. The
// handler's context carries the span (a span the handler starts is its
// child) and, when it is sampled, a logger (handler.Logger) with the
// trace_id and span_id attributes.
//
// Give it to worker.Use first, so that it is the outermost middleware,
// and pass the Telemetry to worker.Observers too: the span then ends
// when the worker acknowledged the record, with the job's outcome, the
// ack and the renewals of its lock, and the consumed count is kept.
// Without the observer the span ends when the handler returns, with its
// error only, and of the metrics only the duration and the wait are
// recorded (the middleware records them, on the handler's goroutine).
// A job held through a pause (handler.Unavailable) and run again on the
// same delivery keeps its span, with an event per run again, and a
// duration per run.
func (t *Telemetry) Middleware() handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			r := t.runs.load(job)
			observed := r != nil
			if !observed {
				r = new(run)
			}
			r.mu.Lock()
			span := r.span
			if span == nil {
				r.base = t.baseOf(job.Topic, job.Group)
				ctx, span = t.startRun(ctx, job, r.base, time.Time{})
				r.span, r.job = span, job
				// The run is the context's value for runKey itself, which
				// spares a context.WithValue per job. Its first run only:
				// a context handed on by an earlier run may still be read.
				r.Context = ctx
				ctx = r
				if job.DeliveryCount == 1 && !job.Timestamp.IsZero() && t.inst.wait.Enabled(context.Background()) {
					t.inst.wait.Record(context.Background(), time.Since(job.Timestamp).Seconds(), r.base.ok.opts...)
				}
			} else {
				// The same delivery run again after a pause: one span.
				span.AddEvent("shareq.job.rerun")
				ctx = context.WithValue(trace.ContextWithSpan(ctx, span), runKey{}, r)
			}
			base := r.base
			r.mu.Unlock()
			if sc := span.SpanContext(); t.logIDs && sc.IsSampled() {
				ctx = handler.WithLogger(ctx, handler.Logger(ctx).With(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())))
			}
			// Without a meter provider (the API's no-op one), or with the
			// duration dropped by a view, nobody sees the duration: skip
			// the clock and the error's classification.
			measure := t.inst.duration.Enabled(context.Background())
			var start time.Time
			if measure {
				start = time.Now()
			}
			var err error
			if observed {
				err = next.Handle(ctx, job)
			} else {
				err = handleUnobserved(ctx, next, job, span)
			}
			if measure {
				t.processed(ctx, job, base, err, time.Since(start))
			}
			r.mu.Lock()
			r.measured = true
			r.mu.Unlock()
			return err
		})
	}
}

// handleUnobserved runs next and ends span with its error, for a
// middleware whose Telemetry is not the worker's observer.
func handleUnobserved(ctx context.Context, next handler.Handler, job *handler.Job, span trace.Span) (err error) {
	defer func() {
		if v := recover(); v != nil {
			span.SetStatus(codes.Error, "panic")
			span.End()
			panic(v)
		}
		if err != nil && !handler.IsCancelled(err) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attrErrorType.String(errorType(err)))
		}
		span.End()
	}()
	return next.Handle(ctx, job)
}

// startRun starts the span of a run of job: a child of the context
// job's headers carry, or with LinkToJob (or without such a context) the
// root of a trace of its own; never a child of the span ctx holds (the
// worker's own). A zero at is now. The attributes a sampler may look at
// are given at the start; the others, and the links, only to a span that
// records.
func (t *Telemetry) startRun(ctx context.Context, job *handler.Job, b *runBase, at time.Time) (context.Context, trace.Span) {
	opts := b.opts // shared: never appended to in place
	var created trace.SpanContext
	if !t.link {
		// The context the propagator extracts holds the creation's span
		// context as the remote parent (and what else the propagator
		// carries, such as baggage).
		withCreated := t.prop.Extract(ctx, jobHeaders{hs: job.Headers})
		if created = trace.SpanContextFromContext(withCreated); created.IsValid() && !created.Equal(trace.SpanContextFromContext(ctx)) {
			ctx = withCreated
		} else {
			created = trace.SpanContext{}
		}
	}
	if !created.IsValid() && trace.SpanContextFromContext(ctx).IsValid() {
		opts = b.newRoot // without a span in ctx the span is a root already
	}
	if !at.IsZero() {
		opts = append(slices.Clip(opts), trace.WithTimestamp(at))
	}
	ctx, span := t.tracer.Start(ctx, b.name, opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(t.consumerAttrs(job)...)
	if t.link {
		created = t.extract(job, "")
	}
	// Linked as a parent too: the conventions' process span links to
	// each message's creation context.
	if created.IsValid() {
		span.AddLink(trace.Link{SpanContext: created, Attributes: []attribute.KeyValue{linkKind.String("created")}})
	}
	if parked := t.extract(job, ParkedRunPrefix); parked.IsValid() {
		span.AddLink(trace.Link{SpanContext: parked, Attributes: []attribute.KeyValue{linkKind.String("parked_run")}})
	}
	return ctx, span
}

// processed records the duration of a run of the handler chain inside
// the middleware, with the error.type of its failure: a parked job's
// failure too, a job timeout as "timeout".
func (t *Telemetry) processed(ctx context.Context, job *handler.Job, b *runBase, err error, took time.Duration) {
	var errType string
	switch p, parked := handler.ParkedOf(err); {
	case parked:
		if p.Err != nil {
			errType = errorType(p.Err)
		}
	case handler.IsCancelled(err):
		// never ran: no failure
	case err != nil && errors.Is(context.Cause(ctx), worker.ErrJobTimeout):
		errType = handler.ReasonTimeout
	case err != nil:
		errType = errorType(err)
	}
	se := b.ok
	if errType != "" {
		se = t.inst.series(seriesKey{topic: job.Topic, group: job.Group, errType: errType})
	}
	t.inst.duration.Record(context.Background(), took.Seconds(), se.opts...)
}

// extract reads the span context job's headers carry under prefix.
func (t *Telemetry) extract(job *handler.Job, prefix string) trace.SpanContext {
	if prefix != "" && !slices.ContainsFunc(job.Headers, func(h handler.Header) bool { return strings.HasPrefix(h.Key, prefix) }) {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(t.prop.Extract(context.Background(), jobHeaders{hs: job.Headers, prefix: prefix}))
}

// JobStarted implements worker.Observer: it readies the run for the
// middleware, which thereby knows the observer will end its span.
func (t *Telemetry) JobStarted(job *handler.Job) {
	t.runs.store(job, new(run))
}

// JobFinished implements worker.Observer: it ends the run's span with the
// job's outcome and the acknowledgement sent, and records the metrics. A
// job that did not run (its lock ran out before it started) gets a span
// of its own here.
func (t *Telemetry) JobFinished(job *handler.Job, res worker.Result) {
	var span trace.Span
	var b *runBase
	measured := false
	if r := t.runs.loadAndDelete(job); r != nil {
		r.mu.Lock()
		span, measured, b = r.span, r.measured, r.base
		r.mu.Unlock()
	}
	if b == nil {
		b = t.baseOf(job.Topic, job.Group)
	}
	var now time.Time
	if span == nil {
		now = time.Now()
		_, span = t.startRun(context.Background(), job, b, now.Add(-res.Duration))
	}
	failed := res.Outcome == worker.OutcomeRetried || res.Outcome == worker.OutcomeParked || res.Outcome == worker.OutcomeDiscarded
	var errType string
	if failed && res.Err != nil {
		errType = errorType(res.Err)
	}
	if span.IsRecording() {
		t.settle(span, res, failed, errType)
		span.End(trace.WithTimestamp(now))
	} else {
		span.End()
	}

	if res.Ran && !measured && t.inst.duration.Enabled(context.Background()) { // no middleware, or a panic went through it
		var et string
		if res.Err != nil && res.Outcome != worker.OutcomeInterrupted {
			et = errorType(res.Err)
		}
		t.inst.duration.Record(context.Background(), res.Duration.Seconds(), t.inst.series(seriesKey{topic: job.Topic, group: job.Group, errType: et}).opts...)
	}
	var se *series
	if i := int(res.Outcome); errType == "" && i >= 0 && i < len(runBase{}.outcomes) {
		se = b.outcomes[i]
	}
	if se != nil {
		se.consumed.Add(1)
	} else {
		t.inst.series(seriesKey{topic: job.Topic, group: job.Group, outcome: res.Outcome.String(), errType: errType}).consumed.Add(1)
	}
}

// settle writes how the run ended on its span.
func (t *Telemetry) settle(span trace.Span, res worker.Result, failed bool, errType string) {
	as := make([]attribute.KeyValue, 0, 8)
	as = append(as, attrOutcome.String(res.Outcome.String()), attrAck.String(res.Ack.String()), attrRan.Bool(res.Ran), attrFinal.Bool(res.Final))
	if handler.ReasonOf(res.Err) == handler.ReasonTimeout {
		as = append(as, attrTimedOut.Bool(true))
	}
	if p := res.Parked; p != nil {
		as = append(as, attrParkedTopic.String(p.Topic), attrParkedReason.String(p.Reason))
	}
	if res.Outcome == worker.OutcomeInterrupted && res.Err != nil {
		as = append(as, attrInterrupted.String(res.Err.Error()))
	}
	if errType != "" {
		as = append(as, attrErrorType.String(errType))
	}
	span.SetAttributes(as...)
	if failed && res.Err != nil {
		var pe *handler.PanicError
		if errors.As(res.Err, &pe) {
			span.RecordError(res.Err, trace.WithAttributes(attrExceptionStack.String(string(pe.Stack))))
		} else {
			span.RecordError(res.Err)
		}
		span.SetStatus(codes.Error, res.Err.Error())
	}
	span.AddEvent("shareq.ack", trace.WithAttributes(attrAck.String(res.Ack.String()), attrFinal.Bool(res.Final),
		attrLockLeft.Int64(res.LockLeft.Milliseconds())))
}

// LockRenewed implements worker.Observer: an event on the run's span.
func (t *Telemetry) LockRenewed(job *handler.Job, err error) {
	r := t.runs.load(job)
	if r == nil {
		return
	}
	span := r.current()
	if span == nil || !span.IsRecording() {
		return
	}
	if err != nil {
		span.AddEvent("shareq.lock.renew_failed", trace.WithAttributes(attribute.String("error", err.Error())))
		return
	}
	span.AddEvent("shareq.lock.renewed")
}

// AckFailed implements worker.Observer. The worker reports a failed
// acknowledgement by partition, not by job, so no span hears of it; the
// record will be delivered again, and its next run has a span of its own.
func (t *Telemetry) AckFailed(string, int32, error) {}

// isJob reports whether id is the ID of the run's job.
func (r *run) isJob(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.job != nil && id != "" && r.job.ID() == id
}
