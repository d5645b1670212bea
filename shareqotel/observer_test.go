package shareqotel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/shareqotel/internal/oteltest"
	"github.com/shareq/shareq/worker"
)

// Each outcome as the worker reports it: an error status only for a job
// that failed, and a span even for a delivery whose handler never ran.
func TestOutcomesOnTheSpan(t *testing.T) {
	t.Parallel()
	timeout := &handler.RetryError{Reason: handler.ReasonTimeout, Err: fmt.Errorf("%w after 1s", worker.ErrJobTimeout)}
	for _, tc := range []struct {
		name   string
		res    worker.Result
		status codes.Code
		errTyp string
	}{
		{"succeeded", worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Ran: true, Final: true}, codes.Unset, ""},
		{"cancelled", worker.Result{Outcome: worker.OutcomeCancelled, Ack: worker.AckAccept, Ran: true, Final: true}, codes.Unset, ""},
		{"retried", worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Ran: true, Err: errors.New("503")}, codes.Error, "_OTHER"},
		{"timed out", worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Ran: true, Err: timeout}, codes.Error, handler.ReasonTimeout},
		{"parked", worker.Result{Outcome: worker.OutcomeParked, Ack: worker.AckAccept, Ran: true, Final: true, Err: handler.Permanent(errors.New("bad")),
			Parked: &handler.DeadLetter{Topic: "t.dlq", Reason: handler.ReasonPermanent}}, codes.Error, handler.ReasonPermanent},
		{"discarded", worker.Result{Outcome: worker.OutcomeDiscarded, Ack: worker.AckReject, Ran: true, Final: true, Err: handler.Permanent(errors.New("bad"))}, codes.Error, handler.ReasonPermanent},
		{"interrupted", worker.Result{Outcome: worker.OutcomeInterrupted, Ack: worker.AckRelease, Ran: true, Err: worker.ErrShutdown}, codes.Unset, ""},
		{"never ran", worker.Result{Outcome: worker.OutcomeInterrupted, Ack: worker.AckRelease, Err: worker.ErrLockExpired}, codes.Unset, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := oteltest.Setup(t)
			job := &handler.Job{Topic: "t", Group: "g", Partition: 1, Offset: 7, DeliveryCount: 2, Timestamp: time.Now()}
			b.Tel.JobStarted(job)
			if tc.res.Ran {
				h := b.Tel.Middleware()(handler.Func(func(context.Context, *handler.Job) error { return tc.res.Err }))
				_ = h.Handle(t.Context(), job)
			}
			if len(b.Spans.Ended()) != 0 {
				t.Fatalf("a span ended before the worker's report: %s", oteltest.Describe(b.Spans.Ended()))
			}
			b.Tel.JobFinished(job, tc.res)
			spans := b.Spans.Ended()
			if len(spans) != 1 {
				t.Fatalf("spans %s, want one", oteltest.Describe(spans))
			}
			s := spans[0]
			if s.Status().Code != tc.status || oteltest.Attr(s, "error.type").AsString() != tc.errTyp ||
				oteltest.Attr(s, "shareq.job.outcome").AsString() != tc.res.Outcome.String() || oteltest.Attr(s, "shareq.job.ran").AsBool() != tc.res.Ran {
				t.Errorf("status %v, attributes %v; want status %v, error.type %q", s.Status(), s.Attributes(), tc.status, tc.errTyp)
			}
			if got := oteltest.Attr(s, "shareq.job.timed_out").AsBool(); got != (tc.name == "timed out") {
				t.Errorf("timed_out %v", got)
			}
			if tc.res.Outcome == worker.OutcomeInterrupted && oteltest.Attr(s, "shareq.job.interrupted_by").AsString() != tc.res.Err.Error() {
				t.Errorf("interrupted_by %v", oteltest.Attr(s, "shareq.job.interrupted_by"))
			}
			if e, ok := oteltest.HasEvent(s, "shareq.ack"); !ok || oteltest.EventAttr(e, "shareq.ack").AsString() != tc.res.Ack.String() {
				t.Errorf("events %v", s.Events())
			}
			if n := oteltest.SumWith(b.Metrics(t)["messaging.client.consumed.messages"], "shareq.job.outcome", tc.res.Outcome.String()); n != 1 {
				t.Errorf("consumed{outcome=%s} = %d, want 1", tc.res.Outcome, n)
			}
		})
	}
}
