package handler

import (
	"context"
	"log/slog"
)

type loggerKey struct{}

// WithLogger returns a context that carries l. The worker gives every
// job's context its own logger (worker.Logger), so middleware built
// without one (middleware.Logging(nil), the dlq middleware) log through
// it, and a handler can too, with [Logger].
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the logger ctx carries (see [WithLogger]), or
// slog.Default() when it carries none.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}
