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

	// 1. A broker in this process, with the topics, and the
	// application's Kafka client.
	broker, err := startBroker(stdout)
	if err != nil {
		return sum, err
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()
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

	// 3. The relay, the worker with the claim middleware, the scheduler.
	bg, err := newBackground(pool, cl, brokers, log)
	if err != nil {
		return sum, err
	}

	// 4.-8. The users, and what the app does for them (script).
	d := &demo{cfg: cfg, sum: &sum, stdout: stdout, pool: pool, cl: cl, bg: bg, started: time.Now()}
	err = bg.runWhile(ctx, d.script)
	return sum, err
}

// startBroker starts a broker in this process, with the emails topic,
// the follow-ups topic and the cleanup topic, and says where it listens.
// It is franz-go's kfake, what shareq dev runs; it sweeps expired locks
// every 500 ms (5 s by default) so that an abandoned job comes back
// promptly.
func startBroker(stdout io.Writer) (*kfake.Cluster, error) {
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, emailsTopic, followUpsTopic, cleanupTopic),
		kfake.BrokerConfigs(map[string]string{"share.record.lock.sweep.interval.ms": "500"}))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "started an in-process Kafka broker (kfake) on %s\n", strings.Join(broker.ListenAddrs(), ","))
	return broker, nil
}

// background is what every process of the app runs besides serving its
// users: the relay, the worker and the scheduler.
type background struct {
	relay *pgoutbox.Relay      // moves the outbox's jobs to Kafka
	w     *worker.Worker       // runs them
	sched *scheduler.Scheduler // fires the periodic cleanup
	dups  atomic.Int64         // deliveries the claim found done
}

// newBackground builds the relay, which produces through cl, the worker,
// on brokers, with the handlers of signup.go, and the scheduler of the
// periodic cleanup.
func newBackground(pool *pgxpool.Pool, cl *kgo.Client, brokers []string, log *slog.Logger) (*background, error) {
	b := &background{}
	var err error
	if b.relay, err = pgoutbox.NewRelay(pool, cl, pgoutbox.Logger(log)); err != nil {
		return nil, err
	}
	opts, err := workerOptions(pool, func(*handler.Job, string) { b.dups.Add(1) })
	if err != nil {
		return nil, err
	}
	b.w, err = worker.New(append(opts,
		worker.Brokers(brokers...),
		worker.Group(group),
		worker.AutoOffsetReset("earliest"),
		worker.Concurrency(4),
		worker.Logger(log),
	)...)
	if err != nil {
		return nil, err
	}
	// The periodic cleanup: every process of the app runs the scheduler.
	b.sched, err = scheduler.New(pool, scheduler.App(schedulerApp), scheduler.Add(cleanupSchedule(cleanupEvery)),
		scheduler.RetryInterval(time.Second), scheduler.Logger(log))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// runWhile runs the relay, the worker and the scheduler, a goroutine
// each, while f runs; failed reports to f one of them that returned
// before it was stopped. When f returns, runWhile stops them, waits for
// them, and returns f's error.
func (b *background) runWhile(ctx context.Context, f func(ctx context.Context, failed <-chan error) error) error {
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	failed := make(chan error, 3) // one for each, so that none blocks
	for _, p := range []struct {
		name string
		run  func(context.Context) error
	}{{"relay", b.relay.Run}, {"worker", b.w.Run}, {"scheduler", b.sched.Run}} {
		wg.Go(func() {
			if err := p.run(bg); err != nil || bg.Err() == nil {
				failed <- fmt.Errorf("%s stopped: %v", p.name, err)
			}
		})
	}
	return f(ctx, failed)
}

// demo is the scripted part of a run: what the users do, and what the run
// checks the app did, while the background runs. Only the goroutine of
// run uses it.
type demo struct {
	cfg     config
	sum     *Summary
	stdout  io.Writer
	pool    *pgxpool.Pool
	cl      *kgo.Client
	bg      *background
	started time.Time    // when the background started
	failed  <-chan error // a part of the background stopped early

	// What the signups did.
	committedJobs  []string // the welcome emails of the committed signups
	followUps      []string // their follow-ups
	rolledBackJobs []string // the jobs of the rolled-back signup
}

// script is the run once the background runs: the users' requests, then
// what the app did with them, step by step, up to the checks. The first
// step that fails ends it.
func (d *demo) script(ctx context.Context, failed <-chan error) error {
	d.failed = failed
	for _, step := range []func(context.Context) error{
		// 4. The signups, one transaction each; a form submitted twice;
		// an unsubscribe.
		d.signUp, d.submitAgain, d.unsubscribeSecond,
		// 5. The relay and the worker send the committed ones, and the
		// follow-ups once they are due.
		d.waitForWelcomes, d.waitForFollowUps,
		// 6. A job delivered a second time.
		d.deliverAgain,
		// 7. The periodic cleanup.
		d.waitForCleanup,
		// 8. What is where.
		d.count, d.check,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// signUp signs each address of signups up, one transaction each: the
// .invalid one rolls back.
func (d *demo) signUp(ctx context.Context) error {
	for _, email := range signups {
		res, err := signup(ctx, d.pool, d.sum.Run, email, d.cfg.FollowUpIn)
		switch {
		case errors.Is(err, errBlocked):
			d.sum.RolledBack++
			d.rolledBackJobs = append(d.rolledBackJobs, res.JobID, res.FollowUp.ID)
			fmt.Fprintf(d.stdout, "signup of %s rolled back (%v): its user and its jobs %s and %s are gone\n", email, err, res.JobID, res.FollowUp.ID)
		case err != nil:
			return err
		default:
			d.sum.Committed++
			d.committedJobs = append(d.committedJobs, res.JobID)
			d.followUps = append(d.followUps, res.FollowUp.ID)
			fmt.Fprintf(d.stdout, "signed up %s (user %d); welcome email enqueued as job %s, follow-up scheduled in %v as job %s\n",
				email, res.UserID, res.JobID, d.cfg.FollowUpIn, res.FollowUp.ID)
		}
	}
	d.sum.FollowUpsScheduled = len(d.followUps)
	return nil
}

// submitAgain is a double submit of the first form: the same user, the
// welcome enqueued again with its job ID (the claim sends it once), and
// the follow-up found scheduled by its unique key (no second job).
func (d *demo) submitAgain(ctx context.Context) error {
	twice, err := signup(ctx, d.pool, d.sum.Run, signups[0], d.cfg.FollowUpIn)
	if err != nil {
		return err
	}
	d.sum.DoubleSubmitRefused = twice.FollowUp.Duplicate && twice.FollowUp.ID == d.followUps[0]
	fmt.Fprintf(d.stdout, "%s submitted the form again: same user %d; follow-up already scheduled as job %s (duplicate %v)\n",
		signups[0], twice.UserID, twice.FollowUp.ID, twice.FollowUp.Duplicate)
	return nil
}

// unsubscribeSecond is the second user unsubscribing before the
// follow-up is due: it is withdrawn from the outbox.
func (d *demo) unsubscribeSecond(ctx context.Context) error {
	cancelled, err := unsubscribe(ctx, d.pool, d.followUps[1])
	if err != nil {
		return err
	}
	if cancelled == pgoutbox.CancelWithdrawn {
		d.sum.FollowUpsCancelled++
	}
	fmt.Fprintf(d.stdout, "%s unsubscribed: follow-up %s %s\n", signups[1], d.followUps[1], cancelled)
	return nil
}

// welcomes is how many welcome emails were enqueued: one per committed
// signup, and the double submit's copy.
func (d *demo) welcomes() int { return d.sum.Committed + 1 }

// wantFollowUps is how many follow-ups are to be sent: those scheduled,
// but the one withdrawn.
func (d *demo) wantFollowUps() int { return d.sum.FollowUpsScheduled - d.sum.FollowUpsCancelled }

// countSent counts the emails of this run sent by the worker whose job
// IDs start with prefix ("welcome", "follow-up").
func (d *demo) countSent(ctx context.Context, prefix string) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM signup_emails WHERE starts_with(job_id, $1)", prefix+"/"+d.sum.Run+"/").Scan(&n)
	return n, err
}

// waitForWelcomes waits until the relay has produced the welcome emails
// and the worker has sent one to each committed signup, the double
// submit's copy found done by the claim.
func (d *demo) waitForWelcomes(ctx context.Context) error {
	if err := waitFor(ctx, d.failed, "every committed signup's email to be relayed and sent", func() (bool, error) {
		n, err := d.countSent(ctx, "welcome")
		// The relay counts a job once its row's delete has committed,
		// which may be after the worker sent it.
		return n >= d.sum.Committed && d.bg.dups.Load() >= 1 && d.bg.relay.Stats().Produced >= uint64(d.welcomes()), err
	}); err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "the relay produced the committed jobs to %s; the worker sent %d welcome emails, the double submit's copy once\n", emailsTopic, d.sum.Committed)
	return nil
}

// waitForFollowUps waits until the follow-ups have been sent. They wait
// in the outbox until they are due ('shareq jobs list' shows them
// meanwhile); the relay wakes for them by itself. Then it counts those
// sent, and those sent before they were due.
func (d *demo) waitForFollowUps(ctx context.Context) error {
	want := d.wantFollowUps()
	if err := waitFor(ctx, d.failed, "the follow-ups to fall due and be sent", func() (bool, error) {
		n, err := d.countSent(ctx, "follow-up")
		return n >= want && d.bg.relay.Stats().Produced >= uint64(d.welcomes()+want), err
	}); err != nil {
		return err
	}
	var err error
	if d.sum.FollowUpsSent, err = d.countSent(ctx, "follow-up"); err != nil {
		return err
	}
	// Sent before due: earlier than the signup's transaction start plus
	// the delay (the job was due later still: In counts from its insert).
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM signup_emails e JOIN signup_users u ON u.id = e.user_id
		WHERE starts_with(e.job_id, $1) AND e.sent_at < u.created_at + $2::interval`, "follow-up/"+d.sum.Run+"/", d.cfg.FollowUpIn).Scan(&d.sum.FollowUpsEarly); err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "the follow-ups fell due after %v: the worker sent %d (none before its time: %v), none to the one who unsubscribed\n",
		d.cfg.FollowUpIn, d.sum.FollowUpsSent, d.sum.FollowUpsEarly == 0)
	return nil
}

// deliverAgain puts the first welcome email on the topic again, with its
// ID: what a relay that died after the broker's acknowledgement and
// before its delete produces when it restarts. The claim finds the job
// done.
func (d *demo) deliverAgain(ctx context.Context) error {
	q, err := enqueue.New(d.cl)
	if err != nil {
		return err
	}
	id := d.committedJobs[0]
	var again Welcome
	if err := d.pool.QueryRow(ctx, "SELECT user_id, email FROM signup_emails WHERE job_id = $1", id).Scan(&again.UserID, &again.Email); err != nil {
		return err
	}
	if _, err := q.Enqueue(ctx, emailsTopic, again, enqueue.ID(id)); err != nil {
		return err
	}
	if err := waitFor(ctx, d.failed, "the second copy to reach the claim", func() (bool, error) { return d.bg.dups.Load() >= 2, nil }); err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "job %s delivered a second time: the claim found it done, and it was not sent again\n", id)
	return nil
}

// countCleanups counts the cleanups that ran since the background
// started.
func (d *demo) countCleanups(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, "SELECT count(*) FROM signup_cleanups WHERE ran_at >= $1", d.started).Scan(&n)
	return n, err
}

// waitForCleanup waits until a cleanup of this run has run: the
// scheduler fires one every second.
func (d *demo) waitForCleanup(ctx context.Context) error {
	if err := waitFor(ctx, d.failed, "a cleanup firing to run", func() (bool, error) {
		n, err := d.countCleanups(ctx)
		return n >= 1, err
	}); err != nil {
		return err
	}
	var err error
	if d.sum.Cleanups, err = d.countCleanups(ctx); err != nil {
		return err
	}
	st := d.bg.sched.Stats()
	fmt.Fprintf(d.stdout, "the scheduler (app %s, leading %v) enqueued %d cleanup firings; %d ran so far\n",
		st.App, st.Leading, st.Schedules[0].Enqueued, d.sum.Cleanups)
	return nil
}

// count fills in the summary's counts: the emails sent, the jobs relayed
// and on the topic, the duplicates, the outbox rows left, and what is
// left of the rolled-back signup.
func (d *demo) count(ctx context.Context) error {
	var err error
	if d.sum.Sent, err = d.countSent(ctx, "welcome"); err != nil {
		return err
	}
	d.sum.Relayed, d.sum.Duplicates = d.bg.relay.Stats().Produced, d.bg.dups.Load()
	// The outbox rows left besides the cleanup's next firings, which the
	// scheduler keeps enqueuing.
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM "+pgoutbox.Table+" WHERE topic <> $1", cleanupTopic).Scan(&d.sum.OutboxRows); err != nil {
		return err
	}
	ends, err := kadm.NewClient(d.cl).ListEndOffsets(ctx, emailsTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) { d.sum.OnTopic += o.Offset })
	return d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM signup_users WHERE run = $1 AND email LIKE '%.invalid'),
		(SELECT count(*) FROM signup_emails WHERE job_id = ANY($2))`, d.sum.Run, d.rolledBackJobs).Scan(&d.sum.RolledBackUsers, &d.sum.RolledBackSent)
}

// check prints the counts, and returns an error unless each holds.
func (d *demo) check(context.Context) error {
	sum := d.sum
	fmt.Fprintf(d.stdout, "signups %d committed, %d rolled back; relayed %d; on %s %d (two sent twice: the double submit, and one on purpose); "+
		"welcome emails sent %d; duplicates suppressed %d; follow-ups scheduled %d, cancelled %d, sent %d; outbox rows left %d; "+
		"users and emails of rolled-back signups %d and %d\n",
		sum.Committed, sum.RolledBack, sum.Relayed, emailsTopic, sum.OnTopic, sum.Sent, sum.Duplicates,
		sum.FollowUpsScheduled, sum.FollowUpsCancelled, sum.FollowUpsSent, sum.OutboxRows, sum.RolledBackUsers, sum.RolledBackSent)
	if sum.Sent != sum.Committed || sum.OnTopic != int64(sum.Committed)+2 || sum.OutboxRows != 0 || sum.RolledBackUsers != 0 || sum.RolledBackSent != 0 ||
		!sum.DoubleSubmitRefused || sum.FollowUpsCancelled != 1 || sum.FollowUpsSent != d.wantFollowUps() || sum.FollowUpsEarly != 0 {
		return errors.New("the checks failed: want one email per committed signup, none for the rolled-back one, one follow-up per signup " +
			"not unsubscribed and none before its time, and an empty outbox")
	}
	return nil
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
