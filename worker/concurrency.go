package worker

// ConcurrencyChecker is a handler, or a handler a middleware returned,
// that holds a resource of its own size while a job runs (a connection of
// a database pool, for the claim of idempotency.Middleware with a pgstore
// store) and can tell whether that resource is too small for concurrency
// jobs at once. CheckConcurrency returns nil when it is large enough, and
// otherwise an error that says what the worker will do short of it and how
// to size it.
//
// [Worker.Check] asks every handler given to [Handle], and every layer of
// middleware it builds around one ([Use], Handle's own middleware), that
// implements it, and logs each error at Warn level (an error given by
// several, as by the claims of several topics on one store, once); the
// worker starts all the same. A layer hidden inside a handler the
// application chained itself (handler.Chain(h, claims, other)) is not
// found: pass the middleware to Handle or Use.
type ConcurrencyChecker interface {
	CheckConcurrency(concurrency int) error
}
