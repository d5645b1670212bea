// Package scheduler enqueues periodic jobs: each [Schedule] fires on a
// fixed interval ([Every]) or a 5-field cron expression ([ParseCron]), and
// each firing is a job enqueued through the transactional outbox of
// enqueue/pgoutbox, which the relay moves to Kafka when it is due.
//
// Every process of an app runs the same [Scheduler] (New, then Run in a
// goroutine of its own); one of them is the active one and fires, the
// others wait to take over:
//
//	s, err := scheduler.New(pool, scheduler.App("billing"),
//		scheduler.Add(scheduler.Schedule{
//			Name:   "invoices",
//			Spec:   scheduler.MustParseCron("0 3 * * *"), // 03:00 UTC
//			Topic:  "invoices",
//			Value:  Invoices{},
//			Missed: scheduler.RunLast,
//		}))
//	if err != nil {
//		return err
//	}
//	go s.Run(ctx) // and wait for it on shutdown
//
// # One active scheduler
//
// The active scheduler holds a session-level Postgres advisory lock
// (pg_try_advisory_lock, its key derived from [App]) on a connection of
// its own, hijacked from the pool, and enqueues every firing in a
// transaction on that very connection. A firing therefore commits only
// while the session holding the lock is alive: when the process dies or
// its connection breaks, Postgres ends the session and frees the lock,
// and the former leader cannot commit anything more. The others try for
// the lock every [RetryInterval] (default 5 s), which bounds a
// failover's delay; the active one checks its connection every
// [CheckInterval] between firings and, once it fails, stops leading
// ([Scheduler.Leading] false) and goes back to trying.
//
// A session whose process is frozen (SIGSTOP, a paused VM or container,
// a long stall) or whose network went silent is not ended by Postgres on
// its own: its socket stays open, the kernel answers TCP keepalives for
// a stopped process, and the lock would be held, and every firing
// blocked, for as long as the freeze lasts. So the statement that takes
// the lock also sets the session's idle_session_timeout and
// idle_in_transaction_session_timeout to [SessionTimeout] (default
// 30 s): Postgres ends the session, and frees the lock, once the active
// scheduler has sent nothing for that long, and its check every
// CheckInterval renews it. A frozen active scheduler is replaced after
// SessionTimeout plus the followers' RetryInterval; when it wakes, its
// firings due meanwhile fail with its ended session (none commits), and
// it logs that Postgres ended its session and goes back to trying, a
// follower. This needs Postgres 14 or later ([Scheduler.Check] says so).
//
// A lease row was the alternative: it needs a clock-based expiry and a
// renewal loop, and a leader stalled past its lease can still commit;
// the session lock ties leadership to the connection the firings go
// through, and its bound is enforced by the server that holds the lock,
// not by the stalled process. Its limits are Postgres's: a connection
// whose peer vanished (a network partition, no RST) holds the session
// until SessionTimeout or the server's TCP keepalives end it, whichever
// comes first; the lock is not released through PgBouncer in
// transaction pooling mode, so connect the pool directly or through
// session pooling.
//
// # Each firing once
//
// A firing is enqueued with [pgoutbox.EnqueueJobTx], due at its time
// ([pgoutbox.At]: a scheduler whose clock runs ahead of the database's
// holds it in the outbox until then), unique by [UniqueKey] (app,
// schedule name and firing time) for the schedule's period
// ([pgoutbox.UniqueFor]), and with the job ID app/name/time. The unique
// key is decided by a primary key in Postgres: two schedulers that both
// believe they lead for a moment, or a new leader firing again what the
// old one committed as it died, enqueue one job, and the second gets
// [pgoutbox.Result.Duplicate]. The job ID lets the worker's idempotency
// claim absorb the relay's at-least-once repeats too.
//
// # Missed firings
//
// The transaction of a firing also records it as its schedule's last
// firing, in the table [StateTable] (migration 0005). A scheduler that
// becomes the active one reads it: the firings after that one and up to
// the moment it took over fell due while no scheduler ran (all processes
// down, or a failover under way). [Schedule.Missed] says what to do with
// them: [Skip] (the default) enqueues none, [RunLast] enqueues the latest
// once, at once. A schedule with no state (new, or renamed) has missed
// nothing. Firings that fall due while a scheduler is active are never
// missed: a stall longer than the period enqueues each of them when it
// ends. The table, not the unique keys, holds this state: unique keys
// expire one period after their job was produced, while a schedule may
// have been down for days.
//
// # Listing and metrics
//
// [Scheduler.Upcoming] lists the next firings of every schedule after a
// time; it reads no state.
//
// For operators, the active scheduler also records in [StateTable]
// (migration 0006) each schedule's spec ([SpecText]), its next firing and
// itself as leader (host/pid): every schedule's row when it takes over
// (a schedule that has not fired yet has no last firing there) and again
// in the transaction of each firing. shareq jobs schedules lists them,
// and tells from pg_locks whether a session holds the app's lock
// ([LockKey]) now: the recorded next firing and leader are current only
// while one does. A schedule the app no longer runs keeps its row.
//
// [Scheduler.Stats] counts what this process did: whether it leads, its
// elections and database errors, and per schedule the firings enqueued,
// found enqueued already (duplicates) and skipped, how late it enqueued
// them (firing time to commit), and the last and next firing. Package
// metrics/outboxmetrics exports them to Prometheus
// (NewSchedulerCollector), so that this package imports none of it.
//
// A [Scheduler] is safe for concurrent use; Run it once. It needs
// migrations.Up (0002, 0003, 0005 and 0006) and a relay running somewhere.
// While it runs, active or not, it holds one connection of its own,
// taken out of the pool (the pool may open another in its place), and
// otherwise uses the pool only for its check at start.
//
// # The cron parser
//
// [Cron] is this package's own, about 250 lines, fuzzed (FuzzParseCron
// checks the next time of every expression it parses against the fields,
// minute by minute). robfig/cron, the usual Go choice, has a parser that
// can be used alone, but its last release is from 2020 and its module
// also brings a runner this package does not want; next-time for five
// fields is little code, and owning it lets the daylight-saving rules
// above be ours and tested.
package scheduler
