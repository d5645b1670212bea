package middleware

import (
	"context"
	"log/slog"
	"time"

	"github.com/shareq/shareq/handler"
)

// Logging returns middleware that logs every job with l: at Debug level
// when the handler succeeds, Warn when it fails with a retryable error or
// a dlq middleware inside this one parked it ("job parked", with the
// reason and DLQ topic: see handler.ParkedFrom), and Error when it fails
// permanently. Each record has the job's topic,
// partition, offset, ID, delivery count, duration and, on failure, the
// error and its reason. Payloads are never logged. A nil l means the
// logger the job's context carries (handler.Logger: the worker's own,
// worker.Logger), so the worker and its middleware log alike.
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
			if p, parked := handler.ParkedFrom(ctx); err == nil && parked {
				// The dlq middleware inside this one parked the job: not
				// a success.
				level, msg = slog.LevelWarn, "job parked in its dead-letter topic"
				attrs = append(attrs, slog.String("reason", p.Reason), slog.String("dlq_topic", p.Topic))
				if p.Err != nil {
					attrs = append(attrs, slog.String("error", p.Err.Error()))
				}
			}
			if err != nil {
				level, msg = slog.LevelWarn, "job failed, will retry"
				if handler.IsPermanent(err) {
					level, msg = slog.LevelError, "job failed permanently"
				} else if job.LastDelivery() {
					level, msg = slog.LevelError, "job failed on its last delivery"
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
