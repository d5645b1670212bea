// Package middleware holds general-purpose [handler.Middleware]: [Recover]
// turns a panic into a permanent failure, [Timeout] bounds a handler's run
// time, and [Logging] logs each job's outcome with log/slog.
//
// Middleware is applied with handler.Chain or the worker's Use and Handle
// options; the first listed is the outermost.
package middleware
