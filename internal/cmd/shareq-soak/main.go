// Command shareq-soak is shareq's chaos soak: it runs real worker
// processes against a real Apache Kafka broker and a real Postgres,
// injects faults while they work, and then checks that every job's side
// effect happened exactly once and every poison job reached the
// dead-letter topic.
//
//	go run ./internal/cmd/shareq-soak [-jobs 20000] [-workers 4] [-duration-limit 10m] [-short] [-cluster3] [-seed N]
//	make soak
//
// One phase of the soak:
//
//   - makes sure the services run: Postgres (scripts/postgres.sh) and the
//     single-node test broker (scripts/kafka.sh), or the 3-node cluster
//     (scripts/kafka-cluster.sh); it reuses running ones and stops at the
//     end only the ones it started;
//   - creates a job topic (6 partitions) and its DLQ topic, a new share
//     group starting at the earliest offset, and a new Postgres schema
//     with the claim table (migrations.Up) and a soak_effects table that
//     has no key on job_id, so a second effect of a job would be stored and
//     counted rather than refused by the table;
//   - starts worker processes (this binary, re-executed as
//     "shareq-soak worker"), each a worker.Worker with dlq.Middleware
//     outermost and idempotency.Middleware on pgstore inside it, whose
//     handler writes the job's effect row through pgstore.Tx;
//   - produces the jobs at a steady rate, each with a shareq-job-id header:
//     1% poison (a retryable error on every delivery, so each must be
//     parked once the delivery limit is reached), 1% slow (sleeping 2 s past
//     the record lock, so the lock must be renewed), the rest quick;
//   - while the workers run, injects faults at random moments drawn from a
//     seeded generator (the seed is printed; -seed replays a schedule):
//     SIGKILL of a worker process and SIGTERM of one (both restarted), a
//     restart of the broker that keeps its data, a restart of Postgres,
//     and on the 3-node cluster the stop and the crash of the leader of
//     the busiest partition, each brought back; partitions added to the
//     job topic (-partitions-added, fault_partitions.go); in the
//     single-broker phase a share of the jobs goes through the outbox
//     (-outbox, relay.go: pgoutbox.EnqueueTx, relay processes), and a
//     relay is SIGKILLed and SIGSTOPped (fault_relay.go);
//   - waits until every job is accounted for (an effect row or a DLQ
//     record), lets stragglers settle, stops the workers, and checks and
//     prints a report. It exits 1 on a lost job, a double effect, or any
//     other broken promise, and 2 on a setup failure.
//
// The full soak runs the single-broker phase, the overload phase
// (overload.go) and then the 3-node phase; -cluster3 runs only the last,
// -overload only the overload phase, -short only a small single-broker
// phase (make test runs it), -duration D the single-broker phase's
// workload and faults over and over for D (endurance.go). Every phase
// samples its worker processes (sampler.go). -broker-probe runs none of
// them: it checks Apache Kafka alone, whether a share partition stops
// delivering after a broker crash (broker_probe.go). Every phase is bounded by -duration-limit, and
// every process the soak started is stopped when it ends, fails or is
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(workerMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(relayMain(os.Args[2:]))
	}
	os.Exit(driverMain(os.Args[1:]))
}

// options are the driver's flags.
type options struct {
	jobs              int
	workers           int
	concurrency       int
	rate              float64
	durationLimit     time.Duration
	short             bool
	cluster3          bool
	single            bool
	seed              uint64
	repo              string
	keep              bool
	ownBroker         bool
	ownBrokerPortBase int
	strictParking     bool
	pgDownFor         time.Duration
	brokerTerm        bool // the broker-restart faults stop the broker with SIGTERM, not SIGKILL
	webhookDownFor    time.Duration
	commit            string // git describe of the code under test, for the report
	killParking       bool
	parkEarly         bool
	spareDeliveries   int
	poisonPct         float64
	slowPct           float64
	silentBroker      bool
	silentPostgres    bool
	partitionsAdded   int
	frozen            frozenFlags
	relay             relayFlags // the outbox path and the relay faults (relay.go)
	ext               optionsExt // the overload phase's and the endurance mode's (overload.go)
	probe             probeFlags // the broker probe (broker_probe.go)
	healStalls        bool       // the workers run with worker.HealStalls (stalls.go)
	batchWorkers      bool       // every second worker process runs batch handlers (worker_jobs.go)
}

// locateRepo sets o.repo, when -repo did not, to the repository root
// found from the working directory.
func (o *options) locateRepo() error {
	if o.repo != "" {
		return nil
	}
	r, err := findRepo()
	if err != nil {
		return err
	}
	o.repo = r
	return nil
}

func driverMain(args []string) int {
	var o options
	fs := flag.NewFlagSet("shareq-soak", flag.ContinueOnError)
	fs.IntVar(&o.jobs, "jobs", 0, "jobs per phase (default 20000; 1500 with -short)")
	fs.IntVar(&o.workers, "workers", 0, "worker processes (default 4; 2 with -short)")
	fs.IntVar(&o.concurrency, "concurrency", 8, "handlers at once per worker process")
	fs.Float64Var(&o.rate, "rate", 0, "jobs produced per second (default 100; 30 with -short)")
	fs.DurationVar(&o.durationLimit, "duration-limit", 20*time.Minute, "stop and report after this long, whatever the state")
	fs.BoolVar(&o.short, "short", false, "a small single-broker phase with one fault of each kind (for make test)")
	fs.BoolVar(&o.cluster3, "cluster3", false, "run only the 3-broker phase")
	fs.BoolVar(&o.single, "single", false, "run only the single-broker phase")
	fs.Uint64Var(&o.seed, "seed", 0, "fault schedule seed (default: random, printed)")
	fs.StringVar(&o.repo, "repo", "", "repository root holding scripts/ (default: found from the working directory)")
	fs.BoolVar(&o.ownBroker, "own-broker", false, "run the single-broker phase on a private one-node broker (scripts/kafka-cluster.sh, port 29192) instead of the shared test broker, so that its restart does not disturb other test runs")
	fs.IntVar(&o.ownBrokerPortBase, "own-broker-port-base", 29092, "KAFKA_CLUSTER_PORT_BASE of the -own-broker broker: it listens on the base + 100 and the port after it (default 127.0.0.1:29192); give each soak on a shared machine its own")
	fs.BoolVar(&o.strictParking, "strict-parking", false, "fail when healthy jobs were parked in the DLQ by an outage, even though a replay ran them once")
	fs.BoolVar(&o.brokerTerm, "broker-sigterm", false, "the broker-restart faults stop the broker with SIGTERM (a controlled shutdown) instead of SIGKILL, to compare what each brings back (the report's deliveries of done jobs per broker restart)")
	fs.DurationVar(&o.pgDownFor, "pg-down-for", 0, "keep Postgres down this long on its restart (default: down and straight up again)")
	fs.DurationVar(&o.webhookDownFor, "webhook-down-for", 0, "add a fault (single-broker phase): the webhook every job calls is down this long, and handlers return handler.Unavailable(\"webhook\"), which pauses the workers")
	fs.BoolVar(&o.killParking, "kill-parking", false, "add a fault: SIGKILL a worker while it runs a poison job's parking delivery (poison jobs then take 300ms each); reproduces the loss described in RELIABILITY.md")
	fs.BoolVar(&o.parkEarly, "park-early", false, "workers park one delivery before the broker's limit (worker.SpareDeliveries(1)): one spare delivery")
	fs.IntVar(&o.spareDeliveries, "spare-deliveries", 5, "raise the group's share.delivery.count.limit by N above the broker's while workers park at the broker's (worker.DeliveryLimit and worker.SpareDeliveries): N spare deliveries, the configuration RELIABILITY.md recommends against crashes; 0 runs on the broker's limit alone")
	fs.BoolVar(&o.keep, "keep", false, "keep the topics, group and schema of a passing phase (a failing one always keeps them)")
	fs.Float64Var(&o.poisonPct, "poison", 1, "percent of jobs that are poison")
	fs.Float64Var(&o.slowPct, "slow", 1, "percent of jobs that outrun the record lock")
	fs.BoolVar(&o.silentBroker, "silent-broker", true, "add a fault (single-broker phase, not -short): a worker's connections to its broker go silent (no byte passes, nothing is closed) for longer than the lock and the session timeout")
	fs.BoolVar(&o.silentPostgres, "silent-postgres", true, "add a fault (single-broker phase, not -short): a worker's Postgres connections go silent likewise")
	fs.IntVar(&o.partitionsAdded, "partitions-added", -1, "add a fault: this many partitions added to the job topic mid-run, the producer writing to them too (default 3; 0 with -short; 0 turns it off)")
	fs.BoolVar(&o.healStalls, "heal-stalls", true, "the workers run with worker.HealStalls: they free a partition the broker stopped serving themselves (the soak creates the status topic they need)")
	fs.BoolVar(&o.batchWorkers, "batch-workers", true, "every second worker process (w2, w4, ...) runs the jobs through batch handlers of up to 4 (handler.Batch behind idempotency.Batch), so every worker fault also hits batches")
	o.frozen.register(fs)
	o.relay.register(fs)
	registerExtFlags(fs, &o.ext)
	o.probe.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.probe.on {
		return brokerProbeMain(o)
	}
	o.frozen.settle(fs, o.short)
	if code := o.relay.settle(fs, o.short); code != 0 {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "shareq-soak: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.jobs == 0 {
		o.jobs = map[bool]int{true: 1500, false: 20000}[o.short]
	}
	if o.partitionsAdded < 0 {
		o.partitionsAdded = map[bool]int{true: 0, false: 3}[o.short]
	}
	if o.workers == 0 {
		o.workers = map[bool]int{true: 2, false: 4}[o.short]
	}
	if o.rate == 0 {
		o.rate = map[bool]float64{true: 30, false: 100}[o.short]
	}
	if o.seed == 0 {
		o.seed = rand.Uint64() % 1_000_000
	}
	if code := applyExt(&o, fs); code != 0 {
		return code
	}
	switch {
	case o.jobs < 100:
		return usage("-jobs %d: want at least 100", o.jobs)
	case o.workers < 2:
		return usage("-workers %d: want at least 2 (one is killed while another works)", o.workers)
	case o.concurrency < 1:
		return usage("-concurrency %d: want at least 1", o.concurrency)
	case o.rate <= 0:
		return usage("-rate %v: want more than 0", o.rate)
	case o.durationLimit < 30*time.Second:
		return usage("-duration-limit %v: want at least 30s", o.durationLimit)
	case o.short && o.cluster3:
		return usage("-short and -cluster3: give one")
	case o.single && o.cluster3:
		return usage("-single and -cluster3: give one")
	case o.spareDeliveries < 0 || o.spareDeliveries > 8:
		return usage("-spare-deliveries %d: want 0 to 8 (the group limit may not pass 10)", o.spareDeliveries)
	case o.spareDeliveries > 0 && o.parkEarly:
		return usage("-park-early replaces the spare deliveries: give -spare-deliveries 0 with it")
	}
	if err := o.locateRepo(); err != nil {
		fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		return 2
	}

	o.commit = gitDescribe(o.repo)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	deadline := start.Add(o.durationLimit)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	var phases []string
	switch {
	case o.short, o.single:
		phases = []string{phaseSingle}
	case o.cluster3:
		phases = []string{phaseCluster3}
	case o.ext.overload:
		phases = []string{phaseOverload}
	default:
		phases = []string{phaseSingle, phaseOverload, phaseCluster3}
	}
	fmt.Printf("shareq-soak: code %s, seed %d, phases %v, %d jobs per phase at %.0f/s, %d workers x %d handlers, duration limit %v\n",
		o.commit, o.seed, phases, o.jobs, o.rate, o.workers, o.concurrency, o.durationLimit)
	fmt.Printf("shareq-soak: replay this schedule with -seed %d\n", o.seed)

	svc := &services{repo: o.repo}
	defer svc.close()
	code := 0
	var reports []*report
	for i, name := range phases {
		// Each phase gets an equal share of the time left.
		left := time.Until(deadline)
		pctx, pcancel := context.WithTimeout(ctx, left/time.Duration(len(phases)-i))
		rep, err := runPhase(pctx, svc, o, name, o.seed+uint64(i))
		pcancel()
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		svc.restore(rctx)
		rcancel()
		if rep != nil {
			reports = append(reports, rep)
			rep.print(os.Stdout)
			if !rep.ok() {
				code = 1
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "shareq-soak: phase %s: %v\n", name, err)
			if code == 0 {
				code = 2
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Printf("\nshareq-soak: %d phase(s) in %v, seed %d: ", len(reports), time.Since(start).Round(time.Second), o.seed)
	switch {
	case code == 0 && len(reports) == len(phases):
		fmt.Println("PASS")
	case code == 0:
		fmt.Println("INCOMPLETE (interrupted)")
		code = 1
	default:
		fmt.Println("FAIL")
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		fmt.Println("shareq-soak: interrupted")
	}
	return code
}

// gitDescribe names the code under test: the commit, and "-dirty" when
// the working tree has changes.
func gitDescribe(repo string) string {
	out, err := exec.Command("git", "-C", repo, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func usage(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "shareq-soak: "+format+"\n", args...)
	return 2
}

// findRepo walks up from the working directory to the directory holding
// scripts/kafka.sh.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "kafka.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository root (a directory with scripts/kafka.sh); run from the repository or pass -repo")
		}
		dir = parent
	}
}
