package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/scheduler"
	"github.com/shareq/shareq/worker"
)

// group is the worker's share group.
const group = "signup-emails"

// signups are the addresses that sign up; the .invalid one fails its
// last check and rolls back.
var signups = []string{"ada@example.com", "grace@example.com", "mallory@spam.invalid", "linus@example.com"}

// Summary is what a run did.
type Summary struct {
	Run        string // this run's name: its users and job IDs carry it
	Committed  int    // signups that committed
	RolledBack int    // signups that rolled back
	Relayed    uint64 // jobs the relay produced, the cleanup's included
	OnTopic    int64  // records on the emails topic
	Sent       int    // welcome emails sent (rows in signup_emails) for this run
	Duplicates int64  // deliveries the claim found already done
	OutboxRows int64  // rows left in the outbox

	FollowUpsScheduled  int  // follow-ups scheduled by committed signups
	DoubleSubmitRefused bool // the double submit found its follow-up scheduled
	FollowUpsCancelled  int  // follow-ups withdrawn (unsubscribed)
	FollowUpsSent       int  // follow-ups sent
	FollowUpsEarly      int  // follow-ups sent before they were due: none
	Cleanups            int  // cleanup firings of this run that ran

	RolledBackUsers int // users of rolled-back signups in signup_users
	RolledBackSent  int // emails sent for rolled-back signups
}

// tables are the example's own; a real application creates its tables
// with its migration tool.
const tables = `
CREATE TABLE IF NOT EXISTS signup_users (
	id         bigserial   PRIMARY KEY,
	run        text        NOT NULL,
	email      text        NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (run, email)
);
CREATE TABLE IF NOT EXISTS signup_emails (
	job_id  text        PRIMARY KEY,
	user_id bigint      NOT NULL,
	email   text        NOT NULL,
	sent_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS signup_cleanups (
	job_id         text        PRIMARY KEY,
	users_deleted  bigint      NOT NULL,
	emails_deleted bigint      NOT NULL,
	ran_at         timestamptz NOT NULL DEFAULT now()
)`

// run is the whole program. It returns the summary, and an error when a
// step failed or a check did not hold.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (Summary, error) {
	sum := Summary{Run: strconv.FormatInt(time.Now().UnixMilli(), 36)}
	if cfg.DatabaseURL == "" {
		return sum, errNoDatabase
	}
	if cfg.FollowUpIn <= 0 {
		return sum, fmt.Errorf("-follow-up-in %v: want a positive delay", cfg.FollowUpIn)
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// 1. A broker in this process, with the emails topic, and the
	// application's Kafka client.
	// franz-go's kfake, what shareq dev runs; it sweeps expired locks
	// every 500 ms (5 s by default) so that an abandoned job comes back
	// promptly.
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, emailsTopic, followUpsTopic, cleanupTopic),
		kfake.BrokerConfigs(map[string]string{"share.record.lock.sweep.interval.ms": "500"}))
	if err != nil {
		return sum, err
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()
	fmt.Fprintf(stdout, "started an in-process Kafka broker (kfake) on %s\n", strings.Join(brokers, ","))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		return sum, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()

	// 2. The database: shareq's tables (the outbox, the claims) and ours.
	pool, err := openDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return sum, err
	}
	defer pool.Close()

	// 3. The relay, and the worker with the claim middleware.
	relay, err := pgoutbox.NewRelay(pool, cl, pgoutbox.Logger(log))
	if err != nil {
		return sum, err
	}
	store, err := pgstore.New(pool)
	if err != nil {
		return sum, err
	}
	var dups atomic.Int64
	claims, err := idempotency.Middleware(store, idempotency.OnDuplicate(func(*handler.Job, string) { dups.Add(1) }))
	if err != nil {
		return sum, err
	}
	w, err := worker.New(
		worker.Brokers(brokers...),
		worker.Group(group),
		worker.Handle(emailsTopic, handler.JSON(sendWelcome), claims),
		worker.Handle(followUpsTopic, handler.JSON(sendFollowUp), claims),
		worker.Handle(cleanupTopic, handler.JSON(cleanUp), claims),
		worker.AutoOffsetReset("earliest"),
		worker.Concurrency(4),
		worker.Logger(log),
	)
	if err != nil {
		return sum, err
	}
	// The periodic cleanup: every process of the app runs the scheduler.
	sched, err := scheduler.New(pool, scheduler.App(schedulerApp), scheduler.Add(cleanupSchedule(cleanupEvery)),
		scheduler.RetryInterval(time.Second), scheduler.Logger(log))
	if err != nil {
		return sum, err
	}
	started := time.Now()
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	failed := make(chan error, 2) // the relay or the worker returned early
	wg.Go(func() {
		if err := relay.Run(bg); err != nil || bg.Err() == nil {
			failed <- fmt.Errorf("relay stopped: %v", err)
		}
	})
	wg.Go(func() {
		if err := w.Run(bg); err != nil || bg.Err() == nil {
			failed <- fmt.Errorf("worker stopped: %v", err)
		}
	})
	wg.Go(func() {
		if err := sched.Run(bg); err != nil || bg.Err() == nil {
			failed <- fmt.Errorf("scheduler stopped: %v", err)
		}
	})

	// 4. The signups, one transaction each.
	var rolledBackJobs, committedJobs, followUps []string
	for _, email := range signups {
		res, err := signup(ctx, pool, sum.Run, email, cfg.FollowUpIn)
		switch {
		case errors.Is(err, errBlocked):
			sum.RolledBack++
			rolledBackJobs = append(rolledBackJobs, res.JobID, res.FollowUp.ID)
			fmt.Fprintf(stdout, "signup of %s rolled back (%v): its user and its jobs %s and %s are gone\n", email, err, res.JobID, res.FollowUp.ID)
		case err != nil:
			return sum, err
		default:
			sum.Committed++
			committedJobs = append(committedJobs, res.JobID)
			followUps = append(followUps, res.FollowUp.ID)
			fmt.Fprintf(stdout, "signed up %s (user %d); welcome email enqueued as job %s, follow-up scheduled in %v as job %s\n",
				email, res.UserID, res.JobID, cfg.FollowUpIn, res.FollowUp.ID)
		}
	}
	sum.FollowUpsScheduled = len(followUps)

	// A double submit of the first form: the same user, the welcome
	// enqueued again with its job ID (the claim sends it once), and the
	// follow-up found scheduled by its unique key (no second job).
	twice, err := signup(ctx, pool, sum.Run, signups[0], cfg.FollowUpIn)
	if err != nil {
		return sum, err
	}
	sum.DoubleSubmitRefused = twice.FollowUp.Duplicate && twice.FollowUp.ID == followUps[0]
	fmt.Fprintf(stdout, "%s submitted the form again: same user %d; follow-up already scheduled as job %s (duplicate %v)\n",
		signups[0], twice.UserID, twice.FollowUp.ID, twice.FollowUp.Duplicate)

	// The second user unsubscribes before the follow-up is due: it is
	// withdrawn from the outbox.
	cancelled, err := unsubscribe(ctx, pool, followUps[1])
	if err != nil {
		return sum, err
	}
	if cancelled == pgoutbox.CancelWithdrawn {
		sum.FollowUpsCancelled++
	}
	fmt.Fprintf(stdout, "%s unsubscribed: follow-up %s %s\n", signups[1], followUps[1], cancelled)

	// 5. The relay and the worker send the committed ones.
	countSent := func(prefix string) (int, error) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM signup_emails WHERE starts_with(job_id, $1)", prefix+"/"+sum.Run+"/").Scan(&n)
		return n, err
	}
	welcomes := sum.Committed + 1 // the double submit's copy
	if err := waitFor(ctx, failed, "every committed signup's email to be relayed and sent", func() (bool, error) {
		n, err := countSent("welcome")
		// The relay counts a job once its row's delete has committed,
		// which may be after the worker sent it.
		return n >= sum.Committed && dups.Load() >= 1 && relay.Stats().Produced >= uint64(welcomes), err
	}); err != nil {
		return sum, err
	}
	fmt.Fprintf(stdout, "the relay produced the committed jobs to %s; the worker sent %d welcome emails, the double submit's copy once\n", emailsTopic, sum.Committed)

	// The follow-ups wait in the outbox until they are due ('shareq jobs
	// list' shows them meanwhile); the relay wakes for them by itself.
	wantFollowUps := sum.FollowUpsScheduled - sum.FollowUpsCancelled
	if err := waitFor(ctx, failed, "the follow-ups to fall due and be sent", func() (bool, error) {
		n, err := countSent("follow-up")
		return n >= wantFollowUps && relay.Stats().Produced >= uint64(welcomes+wantFollowUps), err
	}); err != nil {
		return sum, err
	}
	if sum.FollowUpsSent, err = countSent("follow-up"); err != nil {
		return sum, err
	}
	// Sent before due: earlier than the signup's transaction start plus
	// the delay (the job was due later still: In counts from its insert).
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM signup_emails e JOIN signup_users u ON u.id = e.user_id
		WHERE starts_with(e.job_id, $1) AND e.sent_at < u.created_at + $2::interval`, "follow-up/"+sum.Run+"/", cfg.FollowUpIn).Scan(&sum.FollowUpsEarly); err != nil {
		return sum, err
	}
	fmt.Fprintf(stdout, "the follow-ups fell due after %v: the worker sent %d (none before its time: %v), none to the one who unsubscribed\n",
		cfg.FollowUpIn, sum.FollowUpsSent, sum.FollowUpsEarly == 0)

	// 6. One job again, with its ID: what a relay that died after the
	// broker's acknowledgement and before its delete produces when it
	// restarts. The claim finds the job done.
	q, err := enqueue.New(cl)
	if err != nil {
		return sum, err
	}
	var again Welcome
	if err := pool.QueryRow(ctx, "SELECT user_id, email FROM signup_emails WHERE job_id = $1", committedJobs[0]).Scan(&again.UserID, &again.Email); err != nil {
		return sum, err
	}
	if _, err := q.Enqueue(ctx, emailsTopic, again, enqueue.ID(committedJobs[0])); err != nil {
		return sum, err
	}
	if err := waitFor(ctx, failed, "the second copy to reach the claim", func() (bool, error) { return dups.Load() >= 2, nil }); err != nil {
		return sum, err
	}
	fmt.Fprintf(stdout, "job %s delivered a second time: the claim found it done, and it was not sent again\n", committedJobs[0])

	// 7. The cleanup fires every second; the first of this run has run.
	countCleanups := func() (int, error) {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM signup_cleanups WHERE ran_at >= $1", started).Scan(&n)
		return n, err
	}
	if err := waitFor(ctx, failed, "a cleanup firing to run", func() (bool, error) {
		n, err := countCleanups()
		return n >= 1, err
	}); err != nil {
		return sum, err
	}
	if sum.Cleanups, err = countCleanups(); err != nil {
		return sum, err
	}
	st := sched.Stats()
	fmt.Fprintf(stdout, "the scheduler (app %s, leading %v) enqueued %d cleanup firings; %d ran so far\n",
		st.App, st.Leading, st.Schedules[0].Enqueued, sum.Cleanups)

	// 8. What is where.
	if sum.Sent, err = countSent("welcome"); err != nil {
		return sum, err
	}
	sum.Relayed, sum.Duplicates = relay.Stats().Produced, dups.Load()
	// The outbox rows left besides the cleanup's next firings, which the
	// scheduler keeps enqueuing.
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgoutbox.Table+" WHERE topic <> $1", cleanupTopic).Scan(&sum.OutboxRows); err != nil {
		return sum, err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, emailsTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return sum, fmt.Errorf("list end offsets: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { sum.OnTopic += o.Offset })
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM signup_users WHERE run = $1 AND email LIKE '%.invalid'),
		(SELECT count(*) FROM signup_emails WHERE job_id = ANY($2))`, sum.Run, rolledBackJobs).Scan(&sum.RolledBackUsers, &sum.RolledBackSent); err != nil {
		return sum, err
	}
	fmt.Fprintf(stdout, "signups %d committed, %d rolled back; relayed %d; on %s %d (two sent twice: the double submit, and one on purpose); "+
		"welcome emails sent %d; duplicates suppressed %d; follow-ups scheduled %d, cancelled %d, sent %d; outbox rows left %d; "+
		"users and emails of rolled-back signups %d and %d\n",
		sum.Committed, sum.RolledBack, sum.Relayed, emailsTopic, sum.OnTopic, sum.Sent, sum.Duplicates,
		sum.FollowUpsScheduled, sum.FollowUpsCancelled, sum.FollowUpsSent, sum.OutboxRows, sum.RolledBackUsers, sum.RolledBackSent)
	if sum.Sent != sum.Committed || sum.OnTopic != int64(sum.Committed)+2 || sum.OutboxRows != 0 || sum.RolledBackUsers != 0 || sum.RolledBackSent != 0 ||
		!sum.DoubleSubmitRefused || sum.FollowUpsCancelled != 1 || sum.FollowUpsSent != wantFollowUps || sum.FollowUpsEarly != 0 {
		return sum, errors.New("the checks failed: want one email per committed signup, none for the rolled-back one, one follow-up per signup " +
			"not unsubscribed and none before its time, and an empty outbox")
	}
	return sum, nil
}

// The scheduler's app, and how often the cleanup fires here.
const (
	schedulerApp = "signup"
	cleanupEvery = time.Second
)

// openDatabase connects to url and creates shareq's tables (migrations.Up)
// and the example's.
func openDatabase(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("-database: %w", err)
	}
	// The worker's claims (one per running job), the relay's round and
	// its listening connection, and the signups.
	cfg.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("-database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach Postgres (-database): %w", err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, tables); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create the example's tables: %w", err)
	}
	return pool, nil
}

// waitFor polls cond until it holds, ctx ends or failed reports an error.
func waitFor(ctx context.Context, failed <-chan error, what string, cond func() (bool, error)) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case err := <-failed:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case <-t.C:
		}
	}
}
