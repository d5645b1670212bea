package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Scale scenario: how a worker's costs grow with its work. Every worker,
// and every raw share loop it is compared with, runs in a process of its
// own (this executable re-executed as scaleWorkerCmd), so that its CPU
// time is its own (getrusage), not the in-process kfake broker's or the
// bench's.
//
//	partitions  one worker on a topic of 6, 60 and 600 partitions
//	processes   1, 3 and 10 worker processes on 60 partitions
//	brokers     one worker on 60 partitions of a 3-broker cluster (kfake
//	            with 3 brokers; on Kafka the -cluster seeds); 1 broker
//	            is the partitions row's 60
//	topics      one worker handling 20 topics of 3 partitions (60 in
//	            all); 1 topic is the partitions row's 60
//	idle        a worker on 1 and on 20 topics of 60 partitions with
//	            nothing to do: its CPU and requests per second
//	start       the same two workers' start: worker.New to Check's return,
//	            to the join, to the first fetch and to the first job run,
//	            each the median of 5 starts, beside the same worker with
//	            AssignmentInterval(0) (the group's interval left at
//	            Kafka's 1 s)
//
// Each throughput point is no-op jobs/s of 100-byte records and the
// worker processes' CPU per job, beside one process of the raw franz-go
// share loop (as the overhead scenario's) on the same topics, just before.
const (
	scaleConcurrency = 100
	scaleStartTopics = 20
	scaleStartParts  = 60
)

// scaleSizes are the counts and limits of the scale scenario.
type scaleSizes struct {
	records     int           // records of each single-worker throughput topic
	procRecords int           // records of the processes row's topic, per run
	limit       time.Duration // the longest span of a throughput measurement
	idle        time.Duration // the span of an idle measurement
}

func scaleSizesFor(quick bool) scaleSizes {
	if quick {
		return scaleSizes{records: 40000, procRecords: 60000, limit: 2 * time.Second, idle: 2 * time.Second}
	}
	return scaleSizes{records: 200000, procRecords: 200000, limit: 4 * time.Second, idle: 5 * time.Second}
}

// scaleRate is one throughput measurement of worker processes.
type scaleRate struct {
	Rate      float64       // jobs/s
	CPUPerJob time.Duration // the processes' user + system time per job
	Jobs      int64         // jobs run in the span measured
	Fetches   int64         // ShareFetch requests written in the span
	Acks      int64         // ShareAcknowledge requests written in the span
}

// runScale runs the scale scenario on c, and its brokers row on a
// cluster of three brokers (a 3-broker kfake when c is kfake, else the
// cluster at clusterSeeds; skipped when that is empty).
func runScale(ctx context.Context, c *cluster, log *slog.Logger, sz scaleSizes, clusterSeeds string, rows map[string]bool,
	add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	want := func(row string) bool { return len(rows) == 0 || rows[row] }
	var errs []error
	fail := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	// compare measures one raw share loop process and then procs worker
	// processes on topics (records in all), each in a group of its own,
	// and reports both and their ratios as variant.
	compare := func(c *cluster, variant string, procs int, topics []string, records int) {
		progress("scale: " + variant + ", raw share loop")
		raw, err := scaleRun(ctx, c, log, 1, topics, records, sz, true)
		if err != nil {
			fail(variant+", raw", err)
			return
		}
		progress("scale: " + variant + ", shareq")
		r, err := scaleRun(ctx, c, log, procs, topics, records, sz, false)
		if err != nil {
			fail(variant, err)
			return
		}
		add(variant, "raw_jobs_per_s", raw.Rate, "jobs/s", fmt.Sprintf("raw share loop, 1 process; %d jobs measured", raw.Jobs))
		add(variant, "jobs_per_s", r.Rate, "jobs/s", fmt.Sprintf("shareq, concurrency=%d; %d jobs measured", scaleConcurrency, r.Jobs))
		add(variant, "vs_raw_share", r.Rate/raw.Rate, "x", "shareq jobs/s / raw share loop jobs/s")
		add(variant, "raw_cpu_per_job", us(raw.CPUPerJob), "µs", "raw share loop processes' user+system time per job")
		add(variant, "cpu_per_job", us(r.CPUPerJob), "µs", "worker processes' user+system time per job")
		add(variant, "jobs_per_fetch", float64(r.Jobs)/float64(max(1, r.Fetches)), "jobs",
			fmt.Sprintf("shareq: jobs per ShareFetch (%d ShareAcknowledge on their own); raw share loop %.0f", r.Acks,
				float64(raw.Jobs)/float64(max(1, raw.Fetches))))
		if raw.CPUPerJob > 0 {
			add(variant, "cpu_vs_raw_share", float64(r.CPUPerJob)/float64(raw.CPUPerJob), "x", "shareq CPU per job / raw share loop CPU per job")
		}
	}

	// Partitions: one worker on 6, 60 and 600.
	for _, parts := range []int32{6, 60, 600} {
		if !want("partitions") {
			break
		}
		progress(fmt.Sprintf("scale: %d partitions, producing %d records", parts, sz.records))
		topics, err := scaleTopics(ctx, c, fmt.Sprintf("scale-p%d", parts), 1, parts)
		if err == nil {
			err = produceNoop(ctx, c, topics, sz.records)
		}
		if err != nil {
			fail(fmt.Sprintf("partitions=%d", parts), err)
			continue
		}
		compare(c, fmt.Sprintf("partitions=%d, 1 process", parts), 1, topics, sz.records)
	}

	// Processes: 1, 3 and 10 on 60 partitions. The topic gains records
	// every run and each group reads it from the start, so that later
	// runs, which settle later, have more.
	var ptopic []string
	if want("processes") {
		var err error
		ptopic, err = scaleTopics(ctx, c, "scale-procs", 1, 60)
		fail("processes", err)
	}
	total := 0
	for _, n := range []int{1, 3, 10} {
		if ptopic == nil {
			break
		}
		progress(fmt.Sprintf("scale: %d processes, producing %d records", n, sz.procRecords))
		if err := produceNoop(ctx, c, ptopic, sz.procRecords); err != nil {
			fail(fmt.Sprintf("processes=%d", n), err)
			break
		}
		total += sz.procRecords
		compare(c, fmt.Sprintf("processes=%d, 60 partitions", n), n, ptopic, total)
	}

	// Topics: 20 of 3 partitions against the 1 of 60 above.
	if want("topics") {
		progress(fmt.Sprintf("scale: 20 topics of 3 partitions, producing %d records", sz.records))
		t20, err := scaleTopics(ctx, c, "scale-t20", 20, 3)
		if err == nil {
			err = produceNoop(ctx, c, t20, sz.records)
		}
		if err != nil {
			fail("topics=20", err)
		} else {
			compare(c, "topics=20 × 3 partitions, 1 process", 1, t20, sz.records)
		}
	}

	// Brokers: the same 60 partitions on 3 brokers.
	fail("brokers=3", func() error {
		if !want("brokers") {
			return nil
		}
		seeds := clusterSeeds
		if c.kind == "kfake" {
			seeds = "kfake3"
		}
		if seeds == "" {
			progress("scale: brokers=3 skipped (no -cluster; scripts/kafka-cluster.sh seeds)")
			return nil
		}
		c3, err := newCluster(ctx, seeds)
		if err != nil {
			return err
		}
		defer c3.close()
		n, err := c3.brokers(ctx)
		if err != nil {
			return err
		}
		progress(fmt.Sprintf("scale: %d brokers, 60 partitions, producing %d records", n, sz.records))
		topics, err := scaleTopics(ctx, c3, "scale-b3", 1, 60)
		if err == nil {
			err = produceNoop(ctx, c3, topics, sz.records)
		}
		if err != nil {
			return err
		}
		compare(c3, fmt.Sprintf("brokers=%d, 60 partitions (replication %d), 1 process", n, c3.replication), 1, topics, sz.records)
		return nil
	}())

	if want("start") {
		errs = append(errs, runScaleStart(ctx, c, log, sz, add, progress))
	}
	return errors.Join(errs...)
}

// runScaleStart runs the scale scenario's idle and start rows (alone:
// shareq-bench -scenarios start): a worker on 1 and on 20 topics of 60
// partitions, one record each.
func runScaleStart(ctx context.Context, c *cluster, log *slog.Logger, sz scaleSizes,
	add func(variant, metric string, v float64, unit, note string), progress func(string)) error {
	progress(fmt.Sprintf("scale: %d topics of %d partitions for start and idle", scaleStartTopics, scaleStartParts))
	st, err := scaleTopics(ctx, c, "scale-start", scaleStartTopics, scaleStartParts)
	if err == nil {
		err = produceNoop(ctx, c, st, len(st))
	}
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	var errs []error
	for _, topics := range [][]string{st[:1], st} {
		v := fmt.Sprintf("%d topic(s) × %d partitions", len(topics), scaleStartParts)
		progress("scale: start and idle, " + v)
		if err := scaleStartIdle(ctx, c, log, topics, sz, v, add); err != nil {
			errs = append(errs, fmt.Errorf("start and idle, %s: %w", v, err))
		}
	}
	return errors.Join(errs...)
}

func us(d time.Duration) float64     { return float64(d) / float64(time.Microsecond) }
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// scaleTopics creates n topics of partitions named after the run and
// what, in one request, and waits until every partition has a leader.
func scaleTopics(ctx context.Context, c *cluster, what string, n int, partitions int32) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%s-%d-%s", c.run, what, i, randHex(2))
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resps, err := c.adm.CreateTopics(ctx, partitions, c.replication, nil, names...)
	if err == nil {
		err = resps.Error()
	}
	c.topics = append(c.topics, names...)
	if err != nil {
		return nil, fmt.Errorf("create topics %s: %w", what, err)
	}
	for ctx.Err() == nil {
		md, err := c.adm.ListTopics(ctx, names...)
		ok := err == nil
		for _, name := range names {
			ok = ok && md[name].Err == nil && len(md[name].Partitions) == int(partitions)
			for _, p := range md[name].Partitions {
				ok = ok && p.Leader >= 0
			}
		}
		if ok {
			return names, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("topics %s: no leaders: %w", what, ctx.Err())
}

// produceNoop writes records 100-byte records round-robin over topics.
func produceNoop(ctx context.Context, c *cluster, topics []string, records int) error {
	value := make([]byte, 100)
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topics[i%len(topics)], Value: value}
	}
	return c.produce(ctx, recs)
}

// scaleRun runs procs worker processes (with raw, raw share loops) in a
// new share group on topics until they have run records jobs or sz.limit
// has passed since the span began, and returns their rate and CPU per
// job. With one process the
// span begins at its first job (the jobs of that first report not
// counted) and, once sz.limit/8 has passed, moves to that mark if at
// least a quarter of sz.limit is left after it; with more, the span
// begins the first time every process's member is on the group's latest
// assignment (waitShareMembersFor), so that joining is not measured.
func scaleRun(ctx context.Context, c *cluster, log *slog.Logger, procs int, topics []string, records int, sz scaleSizes, raw bool) (scaleRate, error) {
	var res scaleRate
	group, err := c.shareGroup(ctx, fmt.Sprintf("scale-%dw", procs))
	if err != nil {
		return res, err
	}
	ps, err := startScaleWorkers(procs, c.seeds, group, topics, scaleConcurrency, raw)
	if err != nil {
		return res, err
	}
	res, err = measureProcs(ctx, c, ps, group, procs, int64(records), sz.limit)
	return res, errors.Join(err, ps.stop(log))
}

// measureProcs is scaleRun's measurement.
func measureProcs(ctx context.Context, c *cluster, ps *scaleProcs, group string, procs int, records int64, limit time.Duration) (scaleRate, error) {
	var res scaleRate
	settled := make(chan error, 1)
	if procs > 1 {
		go func() { settled <- c.waitShareMembersFor(ctx, group, procs, 0) }()
	}
	poll := time.NewTicker(scaleReportEvery / 2)
	defer poll.Stop()
	deadline := time.After(2 * time.Minute)
	var s0 scaleSnap
begin:
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-deadline:
			return res, fmt.Errorf("%w: the workers did not start in 2 minutes", errTimeout)
		case err := <-settled:
			if err != nil {
				return res, err
			}
			s0 = ps.snapshot()
			if s0.jobs >= records {
				return res, fmt.Errorf("%w: all %d records ran before the group settled; use more records", errTimeout, records)
			}
			break begin
		case <-poll.C:
			if procs > 1 {
				continue
			}
			// The span begins after the last job of the first report.
			if s := ps.snapshot(); s.jobs > 0 {
				s0 = s
				s0.at = s.last
				break begin
			}
		}
	}
	warm, warmed := s0, false
	var end scaleSnap
	for {
		s := ps.snapshot()
		if !warmed && procs == 1 && s.at.Sub(s0.at) >= limit/8 {
			warm, warmed = s, true
		}
		if s.jobs >= records || s.at.Sub(s0.at) >= limit {
			end = s
			if s.jobs >= records {
				end.at = s.last // the last job ran up to a report earlier
			}
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-poll.C:
		}
	}
	from := s0
	if warmed && end.at.Sub(warm.at) >= limit/4 && end.jobs > warm.jobs {
		from = warm
	}
	res.Jobs = end.jobs - from.jobs
	if res.Jobs <= 0 {
		return res, fmt.Errorf("%w: everything ran in the first report; use more records", errTimeout)
	}
	res.Rate = float64(res.Jobs) / end.at.Sub(from.at).Seconds()
	res.CPUPerJob = (end.cpu - from.cpu) / time.Duration(res.Jobs)
	res.Fetches = end.reqs["ShareFetch"] - from.reqs["ShareFetch"]
	res.Acks = end.reqs["ShareAcknowledge"] - from.reqs["ShareAcknowledge"]
	return res, nil
}

// scaleStartRounds is how many times scaleStartIdle starts a worker of
// each kind.
const scaleStartRounds = 5

// scaleStartKinds are the workers scaleStartIdle starts, in turn: the
// worker as it is (setting its group's share.assignment.interval.ms to
// worker.AssignmentIntervalDefault) and the baseline that leaves the
// group's interval alone (Kafka's default, 1 s).
var scaleStartKinds = []struct {
	suffix string   // of the variant's name
	args   []string // the scale worker's extra flags
}{
	{"", nil},
	{", AssignmentInterval(0)", []string{"-assignment-interval", "0"}},
}

// scaleStartIdle starts one worker process on topics (each holding one
// record) in a new group, scaleStartRounds times for each of
// scaleStartKinds (taking turns, so that both see the same load), and
// reports the medians of their start times (Check, join, first fetch,
// first job) and, in the last round of the first kind, once it has run
// every record and its group has settled, its CPU and requests per
// second over sz.idle.
func scaleStartIdle(ctx context.Context, c *cluster, log *slog.Logger, topics []string, sz scaleSizes, variant string,
	add func(variant, metric string, v float64, unit, note string)) error {
	times := make([][]startTimes, len(scaleStartKinds))
	for round := range scaleStartRounds {
		for i := range scaleStartKinds {
			k := (i + round) % len(scaleStartKinds) // the kinds take turns going first
			idle := round == scaleStartRounds-1 && k == 0
			st, err := scaleStart(ctx, c, log, topics, sz, variant, scaleStartKinds[k].args, idle, add)
			if err != nil {
				return err
			}
			times[k] = append(times[k], st)
		}
	}
	for k, kind := range scaleStartKinds {
		addStartMedians(times[k], "start, "+variant+kind.suffix, add)
	}
	return nil
}

// scaleStart starts one worker process (its extra flags args) on topics
// in a new group, waits until it has run every record, and returns its
// start times; with idle, it then measures the idle worker (scaleIdle).
func scaleStart(ctx context.Context, c *cluster, log *slog.Logger, topics []string, sz scaleSizes, variant string, args []string, idle bool,
	add func(variant, metric string, v float64, unit, note string)) (st startTimes, err error) {
	group, err := c.shareGroup(ctx, "scale-start")
	if err != nil {
		return st, err
	}
	ps, err := startScaleWorkers(1, c.seeds, group, topics, scaleConcurrency, false, args...)
	if err != nil {
		return st, err
	}
	defer func() { err = errors.Join(err, ps.stop(log)) }()
	if err := c.waitShareMembers(ctx, group, 1); err != nil {
		return st, err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for s := ps.snapshot(); s.jobs < int64(len(topics)); s = ps.snapshot() {
		select {
		case <-wctx.Done():
			return st, fmt.Errorf("%w: %d of %d jobs ran in a minute", errTimeout, s.jobs, len(topics))
		case <-time.After(scaleReportEvery):
		}
	}
	st = ps.startTimes()
	if idle {
		return st, scaleIdle(ctx, ps, sz, variant, add)
	}
	return st, nil
}

// addStartMedians reports the medians of the start times ts as variant.
func addStartMedians(ts []startTimes, variant string, add func(variant, metric string, v float64, unit, note string)) {
	median := func(metric string, of func(startTimes) time.Duration, note string) {
		ds := make([]time.Duration, len(ts))
		for i, t := range ts {
			ds[i] = of(t)
		}
		slices.Sort(ds)
		add(variant, metric, millis(ds[len(ds)/2]), "ms",
			fmt.Sprintf("median of %d, %.1f–%.1f ms; %s", len(ds), millis(ds[0]), millis(ds[len(ds)-1]), note))
	}
	beats := make([]int64, len(ts))
	for i, t := range ts {
		beats[i] = t.beats
	}
	median("check", func(t startTimes) time.Duration { return t.checked }, "worker.New to Check's return (the start-up checks)")
	median("join", func(t startTimes) time.Duration { return t.join }, "worker.New to the member's first ShareGroupHeartbeat (after the control topic's first read)")
	median("first_fetch", func(t startTimes) time.Duration { return t.fetch },
		fmt.Sprintf("worker.New to the member's first ShareFetch (it has an assignment), after %v heartbeats", beats))
	median("first_job", func(t startTimes) time.Duration { return t.first }, "worker.New to the first job run (one record per topic, waiting)")
}

// scaleIdle measures the idle worker of ps: its CPU and requests per
// second over sz.idle, after a quiet second (so that the
// acknowledgements of its last jobs are not counted).
func scaleIdle(ctx context.Context, ps *scaleProcs, sz scaleSizes, variant string,
	add func(variant, metric string, v float64, unit, note string)) error {
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := wait(time.Second); err != nil {
		return err
	}
	a := ps.snapshot()
	if err := wait(sz.idle); err != nil {
		return err
	}
	b := ps.snapshot()
	dt := b.at.Sub(a.at).Seconds()
	byName, sum := reqRates(a, b)
	var note []string
	for _, k := range slices.Sorted(maps.Keys(byName)) {
		note = append(note, fmt.Sprintf("%s %.1f", k, byName[k]))
	}
	add("idle, "+variant, "cpu_per_s", (b.cpu-a.cpu).Seconds()*1000/dt, "ms/s", fmt.Sprintf("worker process CPU over %v", sz.idle))
	add("idle, "+variant, "requests_per_s", sum, "req/s", strings.Join(note, ", "))
	return nil
}
