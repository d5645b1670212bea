package middleware

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/jobctx"
)

// Logging returns middleware that logs every job with l: at Debug level
// when the handler succeeds, Warn when it fails with a retryable error,
// and Error when it fails permanently (or on its last delivery) with no
// dead-letter middleware to park it. A job that a dlq middleware parks,
// inside this one (it returns a *handler.ParkedError) or around it, is
// logged at Debug: the worker logs the parked job once, at Warn, with its
// reason and dead-letter topic. A job that the idempotency middleware
// inside this one found cancelled (a *handler.CancelledError) is logged
// at Debug as cancelled, not as done. A job whose context the worker
// cancelled (shutdown, lost lock, maximum hold: a context cancelled with
// a cause) and whose handler then failed is logged at Info as
// interrupted, with the cause: it is released, not failed. Each record
// has the job's topic, partition, offset, ID, delivery count, duration
// and, on failure, the error and its reason. Payloads are never logged.
// A nil l means the logger the job's context carries (handler.Logger: the
// worker's own, worker.Logger), so the worker and its middleware log
// alike.
func Logging(l *slog.Logger) handler.Middleware {
	return func(next handler.Handler) handler.Handler {
		return handler.Func(func(ctx context.Context, job *handler.Job) error {
			log := l
			if log == nil {
				log = handler.Logger(ctx)
			}
			start := time.Now()
			err := next.Handle(ctx, job)
			level := slog.LevelDebug
			msg := "job done"
			attrs := []slog.Attr{
				slog.String("topic", job.Topic),
				slog.Int("partition", int(job.Partition)),
				slog.Int64("offset", job.Offset),
				slog.String("job_id", job.ID()),
				slog.Int("delivery", int(job.DeliveryCount)),
				slog.Duration("took", time.Since(start)),
			}
			p, parked := handler.ParkedOf(err)
			switch {
			case handler.IsCancelled(err):
				// The idempotency middleware inside this one found the
				// job cancelled: it did not run.
				msg = "job cancelled; not run"
			case parked:
				// The dlq middleware inside this one parked the job: not
				// a success, and the worker's line says so.
				msg = "job parked in its dead-letter topic"
				attrs = append(attrs, slog.String("reason", p.Reason), slog.String("dlq_topic", p.Topic),
					slog.Int("dlq_partition", int(p.Partition)), slog.Int64("dlq_offset", p.Offset))
				if p.Err != nil {
					attrs = append(attrs, slog.String("error", p.Err.Error()))
				}
			case err != nil:
				cause := context.Cause(ctx)
				switch {
				case errors.Is(ctx.Err(), context.Canceled) && cause != nil && cause != context.Canceled:
					level, msg = slog.LevelInfo, "job interrupted"
					attrs = append(attrs, slog.String("cause", cause.Error()))
				case jobctx.WillPark(ctx, err):
					// The dlq middleware around this one parks it; the
					// worker's line says so.
					level, msg = slog.LevelDebug, "job failed; the dlq middleware parks it"
				case handler.IsPermanent(err):
					level, msg = slog.LevelError, "job failed permanently"
				case handler.IsUnavailable(err):
					// The worker pauses and logs once that the
					// dependency is down and once that it is back.
					level, msg = slog.LevelDebug, "job waits: a dependency is down"
				case isSnooze(err):
					level, msg = slog.LevelDebug, "job snoozed"
				case jobctx.Held(ctx, err):
					// The key's breaker opened: the worker logs once
					// that it opened and once that it closed.
					level, msg = slog.LevelDebug, "job waits: its key's destination is down"
				case job.LastDelivery():
					level, msg = slog.LevelError, "job failed on its last delivery"
				default:
					level, msg = slog.LevelWarn, "job failed, will retry"
				}
				attrs = append(attrs, slog.String("error", err.Error()))
				if r := handler.ReasonOf(err); r != "" {
					attrs = append(attrs, slog.String("reason", r))
				}
			}
			log.LogAttrs(ctx, level, msg, attrs...)
			return err
		})
	}
}

func isSnooze(err error) bool {
	_, ok := handler.SnoozeOf(err)
	return ok
}
