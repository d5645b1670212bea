// Command shareq-bench measures shareq against the alternatives a user
// would weigh it against, in one run, and reports ratios within that run:
//
//	go run ./internal/cmd/shareq-bench [-broker kfake|127.0.0.1:19092|both]
//	    [-database URL] [-scenarios hol,overhead,eos,renew,burst,latency,producer,scale,start,churn,isolation,breaker,snooze,rate,idle] [-out bench-out/] [-quick]
//	    [-cluster HOST:PORT,HOST:PORT,HOST:PORT] [-overhead-partitions N]
//	    [-overhead-batch-bytes N] [-profiles] [-broker-pid PID]
//	    [-scale-rows partitions,processes,topics,brokers,start]
//	go run ./internal/cmd/shareq-bench compare LABEL=DIR[,DIR...] LABEL=DIR[,DIR...]
//
// compare prints the figures of several runs (their -out directories) of
// two or more builds side by side: each build's median, range and run
// count, and its median over the first build's; scripts/bench-ab.sh
// runs two revisions in turns and calls it.
//
// Scenarios, each run on every backend asked for (kfake in process, and
// a real broker):
//
//	hol       head-of-line blocking: 2,000 jobs of 20 ms and 5 of 4 s on
//	          6 partitions and 24 workers; a classic consumer group of 24
//	          members vs shareq at Concurrency 24 vs the ideal list
//	          schedule (the physical limit).
//	overhead  no-op jobs: shareq at Concurrency 1, 24, 100 and 1,000 vs a raw
//	          franz-go share loop and a raw consumer group, on the same
//	          records; each shareq rate as a ratio to the raw share loop,
//	          and the process's CPU time per job of each (getrusage; with
//	          kfake the broker's too), with -broker-pid the broker
//	          process's CPU time per job too, and each point's records
//	          per share fetch. -profiles writes a CPU and an allocation
//	          profile of each shareq point to -out.
//	eos       one INSERT per job, exactly once, 16 slots on both sides:
//	          shareq at Concurrency 16 with the pgstore claim middleware vs
//	          River at MaxWorkers 16 completing the job in the same
//	          transaction (needs -database).
//	renew     jobs three lock durations long on two competing workers:
//	          duplicate executions and lock renewals per job.
//	burst     48 keyless jobs of 1 s enqueued in one EnqueueMany call on 6
//	          partitions, run by 3 worker processes (this executable,
//	          re-executed) of Concurrency 4: makespan against the ideal
//	          ceil(N/(3·C))·d and jobs per worker, with enqueue.Partitioner
//	          and with franz-go's default (sticky) partitioner.
//	latency   start latency: jobs produced at 100/s and at 1,000/s (10 s
//	          each, 3 s with -quick) to a joined, otherwise idle worker of
//	          Concurrency 24; p50, p99 and max from produce to handler start.
//	bigrecords (only when named) 500 records of 1 MiB, one worker process
//	          per variant of Concurrency and worker.MaxBytesInHand: its
//	          peak resident set (VmHWM) against the bound.
//	producer  enqueueing: enqueue.Client.Enqueue against a raw
//	          ProduceSync, a business row + pgoutbox.EnqueueTx against
//	          the business row alone, and the relay's commit-to-receipt
//	          latency at 1,000 jobs/s (the last two need -database).
//	snooze    (only when named; needs -database) 1,000 jobs enqueued
//	          through the outbox, each snoozed 3 times for 61 s
//	          (pgoutbox.Snoozer) and then writing its effect under the
//	          claim middleware, on 2 worker processes of which one is
//	          killed with SIGKILL mid-way: jobs run once, double runs,
//	          lost jobs, runs on a delivery past the first.
//	scale     how costs grow (not run by default; see scale.go): no-op
//	          jobs/s and CPU per job of worker processes against a raw
//	          share loop process, on 6, 60 and 600 partitions, 1, 3 and 10
//	          worker processes, 3 brokers (kfake with 3 brokers; on Kafka
//	          the -cluster seeds of scripts/kafka-cluster.sh) and 20
//	          topics; an idle worker's CPU and requests per second and a
//	          worker's start time on 1 and 20 topics of 60 partitions.
//	          -scale-rows runs some of those rows only (brokers: the
//	          3-broker row alone, to repeat it).
//	start     (only when named) the scale scenario's start and idle
//	          rows alone: 5 starts each of a worker on 1 and 20 topics of
//	          60 partitions, with and without AssignmentInterval(0).
//	churn     (only when named; see churn.go) 20 worker processes on
//	          60 partitions, one leaving and another joining every
//	          500 ms for 30 s:
//	          heartbeats/s and the broker's CPU, with and without
//	          AssignmentInterval(0).
//	idle      (only when named; see idle.go) an idle worker process on
//	          a topic of 60 partitions: its requests per second by name
//	          and its CPU over 30 s, without and with its status topic.
//	isolation (only when named; see limits.go) webhook jobs on HTTP
//	          destinations in this process, limited per host
//	          (worker.KeyLimit, 2 per host, Concurrency 10): 6 healthy
//	          (50 ms), 2 slow (past the 1 s HTTP timeout) and 2 broken
//	          (500) hosts interleaved against the healthy jobs alone:
//	          the healthy p99 produce-to-done ratio, deliveries spent
//	          without a run, the broken jobs' runs before parking.
//	breaker   (only when named) five hosts at 20 and at 4 jobs/s, one down (503,
//	          handler.KeyUnavailable) for 30 s: its jobs' deliveries
//	          spent, the other four's rate while it is down over before,
//	          the breaker's Warn and Info lines.
//	rate      (only when named) worker.TopicRate of 10 and 100 jobs/s on a
//	          backlog, run by 1 and 3 worker processes for 60 s (15 s
//	          with -quick) after a 5 s warm-up: the fleet's rate, the most
//	          jobs started in any 1 s (joins included) and the deliveries
//	          spent (see rate.go).
//
// The shareq worker's only setting in every scenario is its Concurrency
// (handler slots), with a key limit in isolation and breaker; how it
// fetches to fill them is the worker's business.
//
// It prints a table, writes results.csv, results.md (the same as Markdown
// tables), hol-series.csv and PNG charts into -out. See BENCHMARKS.md for figures and what they mean.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// realBrokerDefault is the test broker of scripts/kafka.sh, used for
// -broker both.
const realBrokerDefault = "127.0.0.1:19092"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == bigWorkerCmd {
		os.Exit(bigWorkerMain(ctx, os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == burstWorkerCmd {
		if err := runBurstWorker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-bench "+burstWorkerCmd+":", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == rateWorkerCmd {
		if err := runRateWorker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-bench "+rateWorkerCmd+":", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == scaleWorkerCmd {
		if err := runScaleWorker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-bench "+scaleWorkerCmd+":", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == snoozeWorkerCmd {
		if err := runSnoozeWorker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-bench "+snoozeWorkerCmd+":", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == compareCmd {
		if err := runCompare(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "shareq-bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "shareq-bench:", err)
		}
		os.Exit(1)
	}
}

type options struct {
	backends  []string
	database  string
	scenarios map[string]bool
	out       string
	quick     bool
	cluster   string // seeds of a 3-broker cluster, for the scale scenario
	// scaleRows are the scale scenario's rows to run (-scale-rows); nil:
	// all of them.
	scaleRows map[string]bool
	// overheadParts is the overhead scenario's topic's partition count.
	overheadParts int32
	// overheadBatchBytes bounds the overhead scenario's producer
	// batches; 0: the bench's producer's.
	overheadBatchBytes int32
	// profiles writes a CPU profile of each shareq point of the overhead
	// scenario to out.
	profiles bool
	// brokerPID is the broker's process, whose CPU time per job the
	// overhead scenario measures too; 0: none.
	brokerPID int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("shareq-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	broker := fs.String("broker", "kfake", "kfake, a broker address (host:port), or both (kfake, then $SHAREQ_TEST_KAFKA or "+realBrokerDefault+")")
	database := fs.String("database", os.Getenv("SHAREQ_TEST_POSTGRES"), "Postgres URL for the eos scenario (default $SHAREQ_TEST_POSTGRES; scripts/postgres.sh url)")
	scen := fs.String("scenarios", "hol,overhead,eos,renew,burst,latency", "comma-separated scenarios to run")
	out := fs.String("out", "bench-out", "directory for results.csv and the charts")
	quick := fs.Bool("quick", false, "smaller counts and shorter no-op runs (a few minutes on kfake)")
	overheadParts := fs.Int("overhead-partitions", 6, "partitions of the overhead scenario's topic")
	overheadBatch := fs.Int("overhead-batch-bytes", 0, "producer batch size bound of the overhead scenario's records (0: up to 1 MiB, the bench's producer's)")
	profiles := fs.Bool("profiles", false, "write a CPU profile of each shareq run of the overhead scenario to -out (overhead-c<Concurrency>.pprof, and its allocations as overhead-c<Concurrency>.allocs.pprof beside a base to diff)")
	brokerPID := fs.Int("broker-pid", 0, "the broker's process ID (.cache/kafka.pid after scripts/kafka.sh up): the overhead scenario measures its CPU time per job too")
	clusterSeeds := fs.String("cluster", "", "seed brokers of a 3-broker cluster (scripts/kafka-cluster.sh seeds) for the scale scenario's brokers row on Kafka")
	scaleRows := fs.String("scale-rows", "", "comma-separated rows of the scale scenario to run: partitions, processes, topics, brokers, start (empty: all)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *overheadParts < 1 {
		return options{}, fmt.Errorf("-overhead-partitions %d: want 1 or more", *overheadParts)
	}
	if *overheadBatch < 0 || *overheadBatch > 1<<30 {
		return options{}, fmt.Errorf("-overhead-batch-bytes %d: want 0 (the default) or a byte count up to 1 GiB", *overheadBatch)
	}
	o := options{database: *database, out: *out, quick: *quick, cluster: *clusterSeeds, overheadParts: int32(*overheadParts), overheadBatchBytes: int32(*overheadBatch), profiles: *profiles, brokerPID: *brokerPID, scenarios: map[string]bool{}}
	if *scaleRows != "" {
		o.scaleRows = map[string]bool{}
		for _, r := range strings.Split(*scaleRows, ",") {
			switch r = strings.TrimSpace(r); r {
			case "partitions", "processes", "topics", "brokers", "start":
				o.scaleRows[r] = true
			case "":
			default:
				return o, fmt.Errorf("-scale-rows: unknown row %q (want partitions, processes, topics, brokers, start)", r)
			}
		}
	}
	switch *broker {
	case "both":
		real := os.Getenv("SHAREQ_TEST_KAFKA")
		if real == "" {
			real = realBrokerDefault
		}
		o.backends = []string{"kfake", real}
	case "":
		return o, errors.New("-broker: empty")
	default:
		o.backends = []string{*broker}
	}
	for _, s := range strings.Split(*scen, ",") {
		switch s = strings.TrimSpace(s); s {
		case "hol", "overhead", "eos", "renew", "burst", "latency", "scale", "start", "churn", "producer", "bigrecords", "isolation", "breaker", "snooze", "rate", "idle":
			o.scenarios[s] = true
		case "":
		default:
			return o, fmt.Errorf("-scenarios: unknown scenario %q (want hol, overhead, eos, renew, burst, latency, scale, start, churn, producer, bigrecords, isolation, breaker, snooze, rate, idle)", s)
		}
	}
	return o, nil
}

// sizes are the counts and limits of a run.
type sizes struct {
	noopRecords int
	sweepLimit  time.Duration
	eosJobs     int
	eosConc     int
	renewJobs   int
	latencyFor  time.Duration // how long the latency scenario produces at each rate
	rateFor     time.Duration // the rate scenario's measured period
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{noopRecords: 20000, sweepLimit: 2 * time.Second, eosJobs: 2000, eosConc: 16, renewJobs: 20, latencyFor: 3 * time.Second, rateFor: 15 * time.Second}
	}
	return sizes{noopRecords: 200000, sweepLimit: 8 * time.Second, eosJobs: 20000, eosConc: 16, renewJobs: 20, latencyFor: 10 * time.Second, rateFor: time.Minute}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// Keep the results out of git when -out is inside a checkout.
	if ign := filepath.Join(o.out, ".gitignore"); !exists(ign) {
		if err := os.WriteFile(ign, []byte("*\n"), 0o644); err != nil {
			return err
		}
	}
	logFile, err := os.Create(filepath.Join(o.out, "bench.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sz := sizesFor(o.quick)
	began := time.Now()
	progress := func(backend, what string) {
		fmt.Fprintf(stderr, "[%6.1fs] %s: %s\n", time.Since(began).Seconds(), backend, what)
	}

	var rows []row
	env := func(metric string, v float64, unit, note string) {
		rows = append(rows, row{Backend: "-", Scenario: "env", Variant: "machine", Metric: metric, Value: v, Unit: unit, Note: note})
	}
	env("nproc", float64(runtime.NumCPU()), "cores", cpuModel())
	env("go", 0, "", runtime.Version())
	if (o.scenarios["eos"] || o.scenarios["snooze"]) && o.database != "" {
		env("postgres", 0, "", postgresVersion(ctx, o.database))
	}
	if o.quick {
		env("quick", 1, "", "-quick counts")
	}

	series := []seriesPoint{}
	holPlots := []*plot.Plot{}
	sweepPlots := []*plot.Plot{}
	eosResults := map[string]eosResult{}
	var backendNames []string
	var errs []error

	for _, b := range o.backends {
		c, err := newCluster(ctx, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b, err))
			continue
		}
		name := c.kind
		backendNames = append(backendNames, name)
		l1, l5, _ := loadAvg()
		rows = append(rows, row{Backend: name, Scenario: "env", Variant: "load", Metric: "loadavg_1m_start", Value: l1, Unit: "", Note: fmt.Sprintf("5m %.2f", l5)})
		rows = append(rows, row{Backend: name, Scenario: "env", Variant: "broker", Metric: "lock_duration", Value: c.lock.Seconds(), Unit: "s", Note: strings.Join(c.seeds, ",")})

		br, err := runBackend(ctx, c, log, o, sz, func(s string) { progress(name, s) })
		rows = append(rows, br.rows...)
		series = append(series, br.series...)
		if len(br.hol) > 0 {
			if p, perr := holPlot(name, br.hol); perr == nil {
				holPlots = append(holPlots, p)
			}
		}
		if br.overhead != nil {
			if p, perr := sweepPlot(name, *br.overhead); perr == nil {
				sweepPlots = append(sweepPlots, p)
			}
		}
		if br.eos != nil {
			eosResults[name] = *br.eos
		}
		l1, l5, _ = loadAvg()
		rows = append(rows, row{Backend: name, Scenario: "env", Variant: "load", Metric: "loadavg_1m_end", Value: l1, Unit: "", Note: fmt.Sprintf("5m %.2f", l5)})
		c.close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		// Write what we have after each backend, so a failure later keeps it.
		if werr := writeOutputs(o.out, rows, series); werr != nil {
			errs = append(errs, werr)
		}
		if ctx.Err() != nil {
			break
		}
	}

	if err := writeTable(stdout, rows); err != nil {
		return err
	}
	var charts []string
	if len(holPlots) > 0 {
		path := filepath.Join(o.out, "hol-throughput.png")
		if err := writePanels(path, holPlots, 7.5*vg.Inch, 4.8*vg.Inch); err != nil {
			errs = append(errs, err)
		}
		charts = append(charts, path)
	}
	if len(sweepPlots) > 0 {
		path := filepath.Join(o.out, "overhead-sweep.png")
		if err := writePanels(path, sweepPlots, 7.5*vg.Inch, 4.8*vg.Inch); err != nil {
			errs = append(errs, err)
		}
		charts = append(charts, path)
	}
	if p, err := eosPlot(eosResults, backendNames); err != nil {
		errs = append(errs, err)
	} else if p != nil {
		path := filepath.Join(o.out, "eos.png")
		if err := writePanels(path, []*plot.Plot{p}, 5.5*vg.Inch, 4*vg.Inch); err != nil {
			errs = append(errs, err)
		}
		charts = append(charts, path)
	}
	fmt.Fprintf(stdout, "\nwrote %s, %s, %s in %.0fs\n", filepath.Join(o.out, "results.csv"),
		filepath.Join(o.out, "hol-series.csv"), strings.Join(charts, ", "), time.Since(began).Seconds())
	return errors.Join(errs...)
}

func writeOutputs(dir string, rows []row, series []seriesPoint) error {
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return errors.Join(
		write("results.csv", func(w io.Writer) error { return writeCSV(w, rows) }),
		write("hol-series.csv", func(w io.Writer) error { return writeSeriesCSV(w, series) }),
		write("results.md", func(w io.Writer) error { return writeMarkdown(w, rows) }),
	)
}

// backendResult is what one backend's scenarios produced.
type backendResult struct {
	rows     []row
	series   []seriesPoint
	hol      []holRun
	overhead *overheadResult
	eos      *eosResult
}

func runBackend(ctx context.Context, c *cluster, log *slog.Logger, o options, sz sizes, progress func(string)) (backendResult, error) {
	var br backendResult
	name := c.kind
	add := func(scenario, variant, metric string, v float64, unit, note string) {
		br.rows = append(br.rows, row{Backend: name, Scenario: scenario, Variant: variant, Metric: metric, Value: v, Unit: unit, Note: note})
	}
	var errs []error
	jobs := holJobs(holFast, holSlow, holFastDur, holSlowDur, holPartitions)
	ideal := idealHOL(jobs)
	holRow := func(r holRun) {
		add("hol", r.Variant, "makespan", r.Makespan.Seconds(), "s", "")
		add("hol", r.Variant, "vs_ideal", r.Makespan.Seconds()/ideal.Makespan.Seconds(), "x", "makespan / ideal makespan")
		if r.Dups > 0 {
			add("hol", r.Variant, "duplicate_runs", float64(r.Dups), "count", "")
		}
		for k, n := range buckets(r.Times, holBucket) {
			br.series = append(br.series, seriesPoint{Backend: name, Variant: r.Variant, Start: time.Duration(k) * holBucket, Count: n})
		}
	}

	if o.scenarios["hol"] {
		progress(fmt.Sprintf("hol: classic consumer group, %d members", holWorkers))
		classic, err := runClassicHOL(ctx, c, log, jobs, holWorkers)
		if err != nil {
			errs = append(errs, fmt.Errorf("hol classic: %w", err))
		} else {
			holRow(classic)
			br.hol = append(br.hol, classic)
		}
		progress(fmt.Sprintf("hol: shareq concurrency=%d", holWorkers))
		sq, err := runShareqHOL(ctx, c, log, jobs, holWorkers, holTimeout)
		if err != nil {
			errs = append(errs, fmt.Errorf("hol shareq: %w", err))
		} else {
			holRow(sq)
			br.hol = append(br.hol, sq)
			if classic.Makespan > 0 {
				add("hol", "classic vs shareq", "makespan_ratio", classic.Makespan.Seconds()/sq.Makespan.Seconds(), "x", "classic makespan / shareq makespan")
			}
		}
		holRow(ideal)
		br.hol = append(br.hol, ideal)
	}
	if o.scenarios["overhead"] {
		progress(fmt.Sprintf("overhead: producing %d no-op records", sz.noopRecords))
		oo := overheadOpts{partitions: o.overheadParts, batchBytes: o.overheadBatchBytes, brokerPID: o.brokerPID}
		if o.profiles {
			oo.profileDir = o.out
		}
		ov, err := runOverhead(ctx, c, log, oo, sz.noopRecords, sz.sweepLimit, func(s string) { progress("overhead: " + s) })
		if err != nil {
			errs = append(errs, fmt.Errorf("overhead: %w", err))
		}
		br.overhead = &ov
		if ov.RawShare > 0 {
			add("overhead", "raw share loop (1 client, batch 500, prefetch)", "jobs_per_s", ov.RawShare, "jobs/s", fmt.Sprintf("%d records", ov.RawShareN))
			add("overhead", "raw share loop (1 client, batch 500, prefetch)", "cpu_per_job", us(ov.RawShareCPU), "us", cpuNote)
			if o.brokerPID != 0 {
				add("overhead", "raw share loop (1 client, batch 500, prefetch)", "broker_cpu_per_job", us(ov.RawShareBrokerCPU), "us", brokerCPUNote)
			}
		}
		if ov.RawGroup > 0 {
			add("overhead", "raw consumer group (1 client, commit at end)", "jobs_per_s", ov.RawGroup, "jobs/s", fmt.Sprintf("%d records", ov.RawGroupN))
			if ov.RawShare > 0 {
				add("overhead", "raw consumer group (1 client, commit at end)", "vs_raw_share", ov.RawGroup/ov.RawShare, "x", "")
			}
		}
		for _, p := range ov.Sweep {
			v := fmt.Sprintf("shareq concurrency=%d", p.Concurrency)
			add("overhead", v, "jobs_per_s", p.Rate, "jobs/s", fmt.Sprintf("%d records", p.Done))
			if ov.RawShare > 0 {
				add("overhead", v, "vs_raw_share", p.Rate/ov.RawShare, "x", "shareq jobs/s / raw share loop jobs/s")
			}
			add("overhead", v, "cpu_per_job", us(p.CPU), "us", cpuNote)
			if o.brokerPID != 0 {
				add("overhead", v, "broker_cpu_per_job", us(p.BrokerCPU), "us", brokerCPUNote)
			}
			if st := p.Member; st.Fetches > 0 {
				add("overhead", v, "records_per_fetch", float64(st.Fetched)/float64(st.Fetches), "records", fmt.Sprintf("%d fetches, %d of whole producer batches; fetch round trip %v (moving average)", st.Fetches, st.WholeBatchFetches, st.FetchRTT.Round(10*time.Microsecond)))
			}
			if ov.RawShareCPU > 0 {
				add("overhead", v, "cpu_vs_raw_share", float64(p.CPU)/float64(ov.RawShareCPU), "x", "CPU per job / the raw share loop's")
			}
		}
	}
	if o.scenarios["eos"] {
		if o.database == "" {
			progress("eos: skipped, no -database (scripts/postgres.sh url)")
		} else {
			progress(fmt.Sprintf("eos: %d jobs, %d slots", sz.eosJobs, sz.eosConc))
			res, err := runEOS(ctx, c, log, o.database, sz.eosJobs, sz.eosConc, func(s string) { progress("eos: " + s) })
			if err != nil {
				errs = append(errs, fmt.Errorf("eos: %w", err))
			} else {
				br.eos = &res
				sq := res.Shareq
				v1 := fmt.Sprintf("shareq + pgstore concurrency=%d", res.Concurrency)
				v2 := fmt.Sprintf("River MaxWorkers=%d cooldown=%v poll=%v", res.Concurrency, riverFetchCooldown, riverFetchPollInterval)
				add("eos", v1, "jobs_per_s", sq.Rate, "jobs/s", fmt.Sprintf("%d jobs", res.Jobs))
				add("eos", v1, "rows_written", float64(sq.Rows), "rows", fmt.Sprintf("want %d; claims %d; runs %d", res.Jobs, sq.Claims, sq.Runs))
				if res.River > 0 {
					add("eos", v1, "vs_river", sq.Rate/res.River, "x", "shareq jobs/s / River jobs/s")
				}
				add("eos", v2, "jobs_per_s", res.River, "jobs/s", fmt.Sprintf("%d jobs", res.Jobs))
				add("eos", v2, "rows_written", float64(res.RiverRows), "rows", fmt.Sprintf("want %d; runs %d", res.Jobs, res.RiverRuns))
			}
		}
	}
	if o.scenarios["renew"] {
		progress(fmt.Sprintf("renew: %d jobs of 3× the %v lock on two workers", sz.renewJobs, c.lock))
		res, err := runRenew(ctx, c, log, sz.renewJobs)
		v := fmt.Sprintf("2 workers × concurrency=%d, jobs of %v (lock %v)", res.Concurrency, res.JobDur, res.Lock)
		if err != nil {
			errs = append(errs, fmt.Errorf("renew: %w", err))
		}
		add("renew", v, "duplicate_runs", float64(res.Duplicates), "count", fmt.Sprintf("%d runs of %d jobs; must be 0", res.Executions, res.Jobs))
		add("renew", v, "accepted", float64(res.Accepted), "count", "")
		if res.Jobs > 0 {
			add("renew", v, "renewals_per_job", float64(res.Renewals)/float64(res.Jobs), "count",
				fmt.Sprintf("min %d max %d; expected %d at margin lock/2", res.MinPerJob, res.MaxPerJob, res.ExpectedRenew))
		}
		add("renew", v, "renew_errors", float64(res.RenewErrors), "count", "")
		if res.JobDur > 0 && res.Makespan > 0 {
			add("renew", v, "makespan_vs_job", res.Makespan.Seconds()/res.JobDur.Seconds(), "x", "all jobs ran at once: ideal 1")
		}
	}
	if o.scenarios["latency"] {
		for _, rate := range latencyRates {
			progress(fmt.Sprintf("latency: %d jobs/s for %v, concurrency=%d", rate, sz.latencyFor, latencyConcurrency))
			r, err := runLatency(ctx, c, log, rate, sz.latencyFor)
			if err != nil {
				errs = append(errs, fmt.Errorf("latency (%d/s): %w", rate, err))
			}
			if r.Jobs == 0 {
				continue
			}
			v := fmt.Sprintf("%d jobs/s, concurrency=%d", rate, latencyConcurrency)
			note := fmt.Sprintf("%d jobs; produce to handler start", r.Jobs)
			add("latency", v, "start_p50", float64(r.P50)/1e6, "ms", note)
			add("latency", v, "start_p99", float64(r.P99)/1e6, "ms", note)
			add("latency", v, "start_max", float64(r.Max)/1e6, "ms", note)
		}
	}
	if o.scenarios["burst"] {
		ideal := burstIdeal()
		runs := map[bool]burstRun{}
		for _, sticky := range []bool{true, false} {
			progress(fmt.Sprintf("burst: %d jobs of %v, %d worker processes × concurrency=%d, sticky=%v",
				burstJobs, burstJobDur, burstWorkers, burstConcurrency, sticky))
			r, err := runBurst(ctx, c, log, sticky)
			if err != nil {
				errs = append(errs, fmt.Errorf("burst (sticky=%v): %w", sticky, err))
				continue
			}
			runs[sticky] = r
			per := make([]string, len(r.PerWorker))
			for i, n := range r.PerWorker {
				per[i] = strconv.Itoa(n)
			}
			add("burst", r.Variant, "makespan", r.Makespan.Seconds(), "s", "")
			add("burst", r.Variant, "vs_ideal", r.Makespan.Seconds()/ideal.Seconds(), "x",
				fmt.Sprintf("ideal ceil(%d/(%d·%d))·%v = %v; goal <= 1.1", burstJobs, burstWorkers, burstConcurrency, burstJobDur, ideal))
			add("burst", r.Variant, "busiest_worker_jobs", float64(slices.Max(r.PerWorker)), "jobs",
				"jobs per worker "+strings.Join(per, "/")+fmt.Sprintf("; even share %d", burstJobs/burstWorkers))
			add("burst", r.Variant, "partitions_used", float64(r.Partitions), "count", fmt.Sprintf("of %d", burstPartitions))
			if r.Dups > 0 {
				add("burst", r.Variant, "duplicate_runs", float64(r.Dups), "count", "")
			}
		}
		if s, ok := runs[true]; ok {
			if p, ok := runs[false]; ok && p.Makespan > 0 {
				add("burst", "sticky vs enqueue.Partitioner", "makespan_ratio", s.Makespan.Seconds()/p.Makespan.Seconds(), "x",
					"default-partitioner makespan / enqueue.Partitioner makespan")
			}
		}
	}
	if o.scenarios["bigrecords"] {
		errs = append(errs, bigRecordsScenario(ctx, c, log, o.quick, add, progress))
	}
	if o.scenarios["producer"] {
		producerAdd := func(variant, metric string, v float64, unit, note string) {
			add("producer", variant, metric, v, unit, note)
		}
		if err := runProducer(ctx, c, log, o.database, o.quick, producerAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("producer: %w", err))
		}
	}
	if o.scenarios["isolation"] {
		errs = append(errs, isolationRows(ctx, c, add, progress))
	}
	if o.scenarios["breaker"] {
		errs = append(errs, breakerRows(ctx, c, add, progress))
	}
	if o.scenarios["snooze"] {
		snoozeAdd := func(variant, metric string, v float64, unit, note string) {
			add("snooze", variant, metric, v, unit, note)
		}
		if err := snoozeScenario(ctx, c, log, o.database, snoozeAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("snooze: %w", err))
		}
	}
	if o.scenarios["idle"] {
		idleAdd := func(variant, metric string, v float64, unit, note string) {
			add("idle", variant, metric, v, unit, note)
		}
		if err := runIdle(ctx, c, log, o.quick, idleAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("idle: %w", err))
		}
	}
	if o.scenarios["rate"] {
		errs = append(errs, rateScenario(ctx, c, log, sz.rateFor, add, progress))
	}
	if o.scenarios["scale"] {
		scaleAdd := func(variant, metric string, v float64, unit, note string) {
			add("scale", variant, metric, v, unit, note)
		}
		if err := runScale(ctx, c, log, scaleSizesFor(o.quick), o.cluster, o.scaleRows, scaleAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("scale: %w", err))
		}
	}
	if o.scenarios["start"] && !o.scenarios["scale"] { // scale runs it too
		startAdd := func(variant, metric string, v float64, unit, note string) {
			add("scale", variant, metric, v, unit, note)
		}
		if err := runScaleStart(ctx, c, log, scaleSizesFor(o.quick), startAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("start: %w", err))
		}
	}
	if o.scenarios["churn"] {
		churnAdd := func(variant, metric string, v float64, unit, note string) {
			add("churn", variant, metric, v, unit, note)
		}
		if err := runChurn(ctx, c, log, o.quick, churnAdd, progress); err != nil {
			errs = append(errs, fmt.Errorf("churn: %w", err))
		}
	}
	return br, errors.Join(errs...)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// cpuModel returns the CPU model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAvg returns the 1- and 5-minute load averages.
func loadAvg() (float64, float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, 0, err
	}
	var l1, l5 float64
	_, err = fmt.Sscan(string(b), &l1, &l5)
	return l1, l5, err
}

func postgresVersion(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "unreachable: " + err.Error()
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return err.Error()
	}
	return v
}
