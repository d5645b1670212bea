// Package console is shareq's operator console: web pages that show the
// share groups, their members, offsets and lag, the topics with their
// dead-letter topics, the jobs parked there (filtered, paged, newest
// first), charts over time (a group's lag and oldest job from a
// [Sampler], a topic's runs per outcome from the job log), given a
// database the Postgres outbox (its jobs for later and the periodic
// schedules), and one job's whole life by its ID (/jobs/ID, from every
// source the console has: package jobinfo); and, with [Actions], that
// replay parked jobs, enqueue a job, cancel a job for later and reset a
// group's start offsets.
//
// It is an http.Handler, for an application to mount behind its own auth:
//
//	ops, err := console.New(console.Client(cl), console.Prefix("/console"), console.Actions(), console.Authenticate(operator))
//	if err != nil {
//		log.Fatal(err)
//	}
//	mux := http.NewServeMux()
//	mux.Handle("/console/", requireOperator(ops))
//
// (requireOperator being the application's auth middleware, and operator
// the func that tells the console who the user is), and "shareq console"
// serves it standalone. It lives in a module of its
// own, so a worker that does not import it does not build it. The pages
// are server-rendered with html/template, which escapes every payload,
// header and error; the stylesheet is embedded; there is no script, and
// the Content-Security-Policy header allows none.
//
// It acts through the code the shareq command uses: [dlq.List], [dlq.Get]
// and [dlq.Replay] for dead-letter topics (a replay started here keeps the
// same replay-once bookkeeping as "shareq dlq replay": a marker per
// replayed job, progress in a consumer group), enqueue for a new job, and
// the share-group status and reset of "shareq status" and "shareq reset".
//
// Every action is a POST with a CSRF token (a cookie, matched by a hidden
// field of the form) and is refused without it, or from another origin
// (http.CrossOriginProtection); a read-only console refuses every POST.
// With [Authenticate] or [BasicAuth] every request is authenticated;
// without them the actions are served to loopback clients only, unless
// given [ActionsWithoutAuthOnNetwork]. Every action is logged at Info, one
// line "console: action" with who (the user, or "anonymous (loopback)"),
// the action, what it acted on, and its outcome (done, failed or refused).
// docs/console.md says what each action does to the broker.
package console
