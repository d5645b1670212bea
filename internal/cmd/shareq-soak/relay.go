package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/enqueue/pgoutbox"
	"github.com/shareq/shareq/handler"
)

// The outbox path of the single-broker phase: a share of the jobs
// (-outbox percent) is not produced by the driver but enqueued into
// Postgres with pgoutbox.EnqueueTx, each in a transaction of its own with
// a business row (soak_orders), as an application would; relay processes
// (this binary, re-executed as "shareq-soak relay", -relays of them, each
// with its own pool and Kafka client) publish them with pgoutbox.Relay.
// The jobs are verified as the others (an effect exactly once, none
// lost); the report adds the records each outbox job has in the job
// topic (a second one is a relay's duplicate publish, which the workers'
// claim must absorb) and the rows left in the outbox (committed, never
// published: they fail the phase). The relay faults are in
// fault_relay.go.

// relayFlags are the outbox path's and the relay faults' flags.
type relayFlags struct {
	outboxPct      float64
	relays         int
	sigkill        bool
	sigstop        bool
	produceTimeout time.Duration
}

func (rf *relayFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&rf.outboxPct, "outbox", 20, "percent of the single-broker phase's jobs enqueued into Postgres with pgoutbox.EnqueueTx and published by relay processes (0 with -short unless given; 0 turns the outbox path and the relay faults off)")
	fs.IntVar(&rf.relays, "relays", 2, "relay processes publishing the outbox jobs")
	fs.BoolVar(&rf.sigkill, "relay-sigkill", true, "add a fault (with -outbox): SIGKILL a relay while it holds a claimed batch, restart it after 1s (off with -short unless given)")
	fs.BoolVar(&rf.sigstop, "relay-sigstop", true, "add a fault (with -outbox): SIGSTOP a relay while it publishes, for longer than its round may take (its ProduceTimeout plus pgoutbox's 30s bound on a round's Postgres work) and so than its claim lease, then SIGCONT (off with -short unless given)")
	fs.DurationVar(&rf.produceTimeout, "relay-produce-timeout", 5*time.Second, "the relays' pgoutbox.ProduceTimeout; their claim lease is this plus pgoutbox.ClaimSlack")
}

// settle turns the outbox path and its faults off with -short, except
// those given explicitly.
func (rf *relayFlags) settle(fs *flag.FlagSet, short bool) int {
	if rf.outboxPct < 0 || rf.outboxPct > 100 {
		return usage("-outbox %v: want 0 to 100", rf.outboxPct)
	}
	if rf.relays < 2 && rf.outboxPct > 0 {
		return usage("-relays %d: want at least 2 (one is killed or frozen while another publishes)", rf.relays)
	}
	if rf.produceTimeout <= 0 {
		return usage("-relay-produce-timeout %v: want more than 0", rf.produceTimeout)
	}
	if !short {
		return 0
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["outbox"] {
		rf.outboxPct = 0
	}
	rf.sigkill = rf.sigkill && set["relay-sigkill"]
	rf.sigstop = rf.sigstop && set["relay-sigstop"]
	return 0
}

// outboxRun is a phase's outbox path: nil when it is off.
type outboxRun struct {
	jobs  map[string]bool // the IDs of the jobs enqueued through the outbox
	fleet *fleet

	committed atomic.Int64
	retries   atomic.Int64 // enqueue transactions tried again after a failure

	mu    sync.Mutex
	stats map[string]relayStats // relay process → its latest counters
}

// relayStats are a relay process's pgoutbox.Stats, as it reports them.
type relayStats struct {
	produced, failures, dbErrors, rounds uint64
	at                                   time.Time
}

// outboxOn reports whether the phase runs the outbox path: the
// single-broker phase, not the endurance mode.
func (p *phase) outboxOn() bool {
	return p.name == phaseSingle && p.o.relay.outboxPct > 0 && p.o.ext.duration == 0
}

// outboxJob reports whether job id goes through the outbox: a hash of its
// ID, so the choice does not draw on the fault schedule's generator.
func (p *phase) outboxJob(id string) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return float64(h.Sum32()%10000) < p.o.relay.outboxPct*100
}

// startRelays creates the business table and starts the relay processes;
// without the outbox path it does nothing.
func (p *phase) startRelays(ctx context.Context, exe string, deadline time.Time) error {
	if !p.outboxOn() {
		return nil
	}
	if _, err := p.db.Exec(ctx, `CREATE TABLE soak_orders (job_id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return fmt.Errorf("create soak_orders: %w", err)
	}
	ob := &outboxRun{jobs: map[string]bool{}, stats: map[string]relayStats{}}
	for _, j := range p.jobs {
		if p.outboxJob(j.id) {
			ob.jobs[j.id] = true
		}
	}
	ob.fleet = &fleet{exe: exe, verb: "relay", logDir: p.logDir, ev: p.ev, args: []string{
		"-brokers", strings.Join(p.seeds, ","),
		"-pg", p.pgURL,
		"-schema", p.schema,
		"-produce-timeout", p.o.relay.produceTimeout.String(),
		"-deadline", deadline.Add(time.Minute).Format(time.RFC3339Nano),
	}}
	for i := range p.o.relay.relays {
		ob.fleet.slots = append(ob.fleet.slots, &slot{name: fmt.Sprintf("r%d", i+1)})
	}
	p.ev.mu.Lock()
	p.ev.onRelay = func(proc string, f []string) {
		if len(f) < 4 {
			return
		}
		var s relayStats
		for i, v := range []*uint64{&s.produced, &s.failures, &s.dbErrors, &s.rounds} {
			*v, _ = strconv.ParseUint(f[i], 10, 64)
		}
		s.at = time.Now()
		ob.mu.Lock()
		ob.stats[proc] = s
		ob.mu.Unlock()
	}
	p.ev.mu.Unlock()
	p.outbox = ob
	fmt.Printf("outbox: %d of %d jobs (%.0f%%) enqueued with pgoutbox.EnqueueTx, published by %d relay processes (ProduceTimeout %v, claim lease %v)\n",
		len(ob.jobs), len(p.jobs), p.o.relay.outboxPct, p.o.relay.relays, p.o.relay.produceTimeout, p.relayLease())
	ob.fleet.start(ctx)
	return nil
}

// stopRelays stops the relay processes, if any.
func (p *phase) stopRelays() {
	if p.outbox != nil {
		p.outbox.fleet.stop(15 * time.Second)
	}
}

// relayLease is how long a relay's claim on its rows lasts while the
// relay does nothing with them (pgoutbox: ProduceTimeout + ClaimSlack).
func (p *phase) relayLease() time.Duration { return p.o.relay.produceTimeout + pgoutbox.ClaimSlack }

// enqueueOutbox commits job j into the outbox with its business row, in
// a transaction of its own, trying again (as an application would) until
// it commits or ctx ends. A commit whose outcome was lost is found by its
// business row, so a job is enqueued once.
func (p *phase) enqueueOutbox(ctx context.Context, j *jobSpec, v any) {
	for attempt := 0; ; attempt++ {
		err := p.enqueueOnce(ctx, j, v)
		if err == nil {
			p.producedIDs.Store(j.id, struct{}{})
			p.produced.Add(1)
			p.outbox.committed.Add(1)
			return
		}
		if ctx.Err() != nil {
			p.produceErrs.Add(1)
			p.ev.note("outbox enqueue %s failed: %v", j.id, err)
			return
		}
		if attempt == 0 {
			p.outbox.retries.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (p *phase) enqueueOnce(ctx context.Context, j *jobSpec, v any) error {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := p.db.Begin(tctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(tctx)) }()
	tag, err := tx.Exec(tctx, `INSERT INTO soak_orders (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, j.id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // an earlier attempt committed, its answer lost
	}
	if _, err := pgoutbox.EnqueueTx(tctx, tx, p.topic, v, enqueue.ID(j.id), enqueue.Key([]byte(j.id))); err != nil {
		return err
	}
	return tx.Commit(tctx)
}

// outboxEmpty reports whether the outbox holds no row (true without the
// outbox path): the drain does not call the jobs lost while a relay has
// rows to publish.
func (p *phase) outboxEmpty(ctx context.Context) bool {
	if p.outbox == nil {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := pgoutbox.ReadBacklog(cctx, p.db)
	return err == nil && b.Rows == 0
}

// relaySection is the report's outbox part.
type relaySection struct {
	jobs, committed, retries int
	left                     int64 // rows still in the outbox
	leftErr                  error
	records                  map[string]int // outbox job → its records in the job topic
	readErr                  error
	dupEvents                int // claim absorptions of jobs a relay published twice
	stats                    map[string]relayStats
	crashes                  int
	lease                    time.Duration
}

// outboxSection reads the outbox's end state: the rows left and the
// records of every outbox job in the job topic.
func (p *phase) outboxSection(ctx context.Context) reportSection {
	ob := p.outbox
	if ob == nil {
		return nil
	}
	s := &relaySection{jobs: len(ob.jobs), committed: int(ob.committed.Load()), retries: int(ob.retries.Load()),
		crashes: ob.fleet.crashes(), lease: p.relayLease()}
	ob.mu.Lock()
	s.stats = maps.Clone(ob.stats)
	ob.mu.Unlock()
	if b, err := pgoutbox.ReadBacklog(ctx, p.db); err != nil {
		s.leftErr = err
	} else {
		s.left = b.Rows
	}
	s.records, s.readErr = p.countRecords(ctx, ob.jobs)
	p.ev.mu.Lock()
	for id, n := range s.records {
		if n > 1 {
			s.dupEvents += p.ev.dups[id]
		}
	}
	p.ev.mu.Unlock()
	return s
}

// countRecords reads the job topic from its start to its end offsets and
// counts the records of each job in ids, by their job ID header.
func (p *phase) countRecords(ctx context.Context, ids map[string]bool) (map[string]int, error) {
	ends, err := p.adm.ListEndOffsets(ctx, p.topic)
	if err != nil {
		return nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.seeds...), kgo.ConsumeTopics(p.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string]int{}
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out, fmt.Errorf("reading %s: %d partitions not read to their end: %w", p.topic, len(want), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == handler.JobIDHeader && ids[string(h.Value)] {
					out[string(h.Value)]++
				}
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

func (s *relaySection) published() (jobs, records, dupJobs, dupRecords int) {
	for _, n := range s.records {
		jobs++
		records += n
		if n > 1 {
			dupJobs++
			dupRecords += n - 1
		}
	}
	return
}

func (s *relaySection) printTo(w io.Writer) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	jobs, records, dupJobs, dupRecords := s.published()
	pf("outbox jobs              %d committed of %d planned (pgoutbox.EnqueueTx, a transaction each with its business row; %d retried after a failure); %d relay processes ran (restarts included), claim lease %v",
		s.committed, s.jobs, s.retries, len(s.relayNames()), s.lease)
	pf("  published              %d jobs in %d records: %d duplicate publishes of %d jobs, their second records absorbed by the claim (%d claim hits on those jobs); rows left in the outbox %d",
		jobs, records, dupRecords, dupJobs, s.dupEvents, s.left)
	var parts []string
	for _, name := range s.relayNames() {
		st := s.stats[name]
		parts = append(parts, fmt.Sprintf("%s produced %d, failures %d, db errors %d", name, st.produced, st.failures, st.dbErrors))
	}
	pf("  relays                 counters as last reported: %s; unexpected exits %d", strings.Join(parts, "; "), s.crashes)
}

func (s *relaySection) relayNames() []string { return slices.Sorted(maps.Keys(s.stats)) }

func (s *relaySection) problems() []string {
	var out []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	jobs, _, _, _ := s.published()
	add(s.leftErr != nil, "outbox rows not readable: %v", s.leftErr)
	add(s.left > 0, "%d rows left in the outbox, never published", s.left)
	add(s.readErr != nil, "outbox jobs' records not counted: %v", s.readErr)
	add(s.readErr == nil && jobs < s.committed, "%d outbox jobs committed and never published (no record in the job topic)", s.committed-jobs)
	add(s.crashes > 0, "%d relay processes exited without being asked to", s.crashes)
	return out
}

// relayMain runs one relay process ("shareq-soak relay ..."): a
// pgoutbox.Relay with its own pool and Kafka client. It reports its
// counters every relayStatsEvery as "EVENT relay produced failures
// db_errors rounds" lines on stdout, logs to stderr, and stops on
// SIGTERM, at its deadline, or when stdin closes (the driver went away).
func relayMain(args []string) int {
	var name, brokers, pgURL, schema, deadline string
	var produceTimeout time.Duration
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.StringVar(&name, "name", "r", "relay name, for events, logs and its Postgres application_name")
	fs.StringVar(&brokers, "brokers", "", "seed brokers, comma separated")
	fs.StringVar(&pgURL, "pg", "", "Postgres URL")
	fs.StringVar(&schema, "schema", "", "Postgres schema holding the outbox")
	fs.DurationVar(&produceTimeout, "produce-timeout", pgoutbox.ProduceTimeoutDefault, "pgoutbox.ProduceTimeout")
	fs.StringVar(&deadline, "deadline", "", "RFC 3339 time at which to stop regardless")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if brokers == "" || pgURL == "" || schema == "" {
		fmt.Fprintln(os.Stderr, "shareq-soak relay: -brokers, -pg and -schema are required")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("proc", name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if deadline != "" {
		t, err := time.Parse(time.RFC3339Nano, deadline)
		if err != nil {
			fmt.Fprintf(os.Stderr, "shareq-soak relay: -deadline: %v\n", err)
			return 2
		}
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, t)
		defer c()
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel(errors.New("stdin closed: driver gone"))
	}()
	if err := runRelay(ctx, log, name, strings.Split(brokers, ","), pgURL, schema, produceTimeout); err != nil {
		log.Error("relay failed", "error", err)
		emit("exit", "error", oneLine(err.Error()))
		return 1
	}
	emit("exit", "ok")
	return 0
}

// relayStatsEvery is how often a relay process reports its counters.
const relayStatsEvery = 250 * time.Millisecond

func runRelay(ctx context.Context, log *slog.Logger, name string, brokers []string, pgURL, schema string, produceTimeout time.Duration) error {
	pcfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return fmt.Errorf("postgres url: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pcfg.ConnConfig.RuntimeParams["application_name"] = relayAppName(name, schema)
	pcfg.MaxConns = 4
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("postgres pool: %w", err)
	}
	defer pool.Close()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, enqueue.ProducerOpts()...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r, err := pgoutbox.NewRelay(pool, cl, pgoutbox.ProduceTimeout(produceTimeout), pgoutbox.Logger(log))
	if err != nil {
		return err
	}
	if err := retryStart(ctx, log, "outbox table check", r.Check); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sctx, stopStats := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStats()
	wg.Go(func() {
		t := time.NewTicker(relayStatsEvery)
		defer t.Stop()
		for {
			s := r.Stats()
			emit("relay", strconv.FormatUint(s.Produced, 10), strconv.FormatUint(s.Failures, 10),
				strconv.FormatUint(s.DBErrors, 10), strconv.FormatUint(s.Rounds, 10))
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return r.Run(ctx)
}

// relayAppName is relay name's Postgres application_name, by which the
// driver finds its sessions.
func relayAppName(name, schema string) string { return "shareq-soak-relay " + schema + " " + name }
