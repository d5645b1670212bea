package main

// The broker probe (-broker-probe, make soak-broker-probe) checks Apache
// Kafka itself, not shareq: can a share partition stop delivering after a
// broker crash, its start offset standing still while records wait?
//
// Its broker control, share-group member, variants and the steps that
// make a variant's stall are package internal/brokerprobe's, which the
// worker's tests share. It starts a private one-node broker
// (scripts/kafka-cluster.sh, like -own-broker, on -own-broker-port-base +
// 100), and for each variant makes
// a topic of one partition and a share group with a small
// share.partition.max.record.locks (-probe-locks, default 100, the
// broker's lowest allowed). It speaks the share-group protocol itself
// (kmsg ShareGroupHeartbeat, ShareFetch, ShareAcknowledge on a plain
// kgo.Client: no shareq code and no kgo share consumer), so every offset
// it holds, accepts or releases, and when, is its choice. A variant
// produces records in log batches of chosen sizes, acquires, accepts all
// but a few low offsets, which it holds, SIGKILLs the broker and starts it
// on its data (the held records were never written to the share state:
// the broker reads a gap there), then acks what the broker re-delivers in
// the variant's way (all, or the gap's first offset released or left to
// its lock's end and acquired again), keeps producing, and watches: the
// group's start offset and lag (DescribeShareGroupOffsets), the log end
// (ListEndOffsets), and whether its fetches come back empty while records
// wait. The verdict of each variant is STALLED (records wait, none
// acquired and the start offset still for -probe-stall-after) or OK (all
// delivered and acked); a stalled partition is then restarted once more
// to show whether that frees it, or, with -probe-remedies, a client
// remedy is tried on it instead, one fresh stall per remedy
// (broker_probe_remedy.go). The broker logs
// kafka.server.share.SharePartition at DEBUG (set on it after every
// start); its lines of the variant's group go to
// .cache/broker-probe/<variant>.log beside an excerpt in the output.
// Each variant names the verdict the code read below expects (Kafka
// 4.4.0 gave exactly those); the probe exits 1 when one differs (a broker
// that fixed the stall shows OK where STALLED is expected), 2 on an error.
//
// The code read behind it (Kafka 4.4, SharePartition.java): after a
// restart, maybeInitialize keeps a "persister read gap window"
// (endOffset, gapStartOffset) while the share partition's end offset is
// the last persisted one; while it is, findLastOffsetAcknowledgedAndMetadata
// stops at the first in-flight batch reaching gapStartOffset, so the
// start offset does not pass it, and every acquisition sets gapStartOffset
// to its last offset + 1, also backwards. canAcquireRecords refuses when no
// record is AVAILABLE and endOffset - startOffset + 1 reaches the limit;
// the window closes only when the end offset moves. Two ways in:
// the persisted in-flight range is past the limit already (a log batch
// acquired whole overshoots it: variant big-batch), or it is exactly at
// the limit and the gap's first offset is acquired again after the rest
// of its batch was acked (full-release-first, full-timeout-first).

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/internal/brokerprobe"
)

type probeFlags struct {
	on         bool
	variants   string
	locks      int
	lockMs     int
	watch      time.Duration
	stallAfter time.Duration
	remedies   string
}

func (p *probeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&p.on, "broker-probe", false, "run only the broker probe (broker_probe.go): can a share partition of Apache Kafka stop delivering after a SIGKILL and restart? Plain share-group requests on a private one-node broker (-own-broker-port-base); prints STALLED or OK per variant")
	fs.StringVar(&p.variants, "probe-variants", "", "broker probe: the variants to run, comma-separated (default all: "+strings.Join(brokerprobe.VariantNames(), ",")+")")
	fs.IntVar(&p.locks, "probe-locks", 100, "broker probe: the groups' share.partition.max.record.locks (100 to 2000 on a default broker)")
	fs.IntVar(&p.lockMs, "probe-lock-ms", 10000, "broker probe: the groups' share.record.lock.duration.ms")
	fs.DurationVar(&p.watch, "probe-watch", 40*time.Second, "broker probe: how long each variant watches the partition after its last step")
	fs.StringVar(&p.remedies, "probe-remedies", "", "broker probe: instead of the freeing restart, try these client remedies on a stalled partition, one per fresh stall of each variant, comma-separated ("+strings.Join(probeRemedyNames(), ",")+"; broker_probe_remedy.go)")
	fs.DurationVar(&p.stallAfter, "probe-stall-after", 20*time.Second, "broker probe: records waiting, none acquired and the start offset still this long is STALLED (keep it above the lock duration)")
}

// brokerProbeMain runs the broker probe; o holds the driver's flags.
func brokerProbeMain(o options) int {
	p := o.probe
	switch {
	case p.locks < 100:
		return usage("-probe-locks %d: want at least 100 (the broker's lowest)", p.locks)
	case p.lockMs < 1000:
		return usage("-probe-lock-ms %d: want at least 1000", p.lockMs)
	case p.stallAfter <= time.Duration(p.lockMs)*time.Millisecond:
		return usage("-probe-stall-after %v: want more than the lock duration (%dms)", p.stallAfter, p.lockMs)
	case p.watch < p.stallAfter:
		return usage("-probe-watch %v: want at least -probe-stall-after (%v)", p.watch, p.stallAfter)
	}
	var run []brokerprobe.Variant
	all := brokerprobe.Variants(p.locks)
	if p.variants == "" {
		run = all
	} else {
		for name := range strings.SplitSeq(p.variants, ",") {
			i := slices.IndexFunc(all, func(v brokerprobe.Variant) bool { return v.Name == strings.TrimSpace(name) })
			if i < 0 {
				return usage("-probe-variants: no variant %q (have %s)", name, strings.Join(brokerprobe.VariantNames(), ","))
			}
			run = append(run, all[i])
		}
	}
	var remedies []*probeRemedy
	if p.remedies != "" {
		for name := range strings.SplitSeq(p.remedies, ",") {
			r, err := parseRemedy(strings.TrimSpace(name))
			if err != nil {
				return usage("-probe-remedies: %v", err)
			}
			remedies = append(remedies, r)
		}
	}
	type probeJob struct {
		v      brokerprobe.Variant
		remedy *probeRemedy
	}
	var jobs []probeJob
	for _, v := range run {
		if len(remedies) == 0 {
			jobs = append(jobs, probeJob{v: v})
		}
		for _, r := range remedies {
			jobs = append(jobs, probeJob{v: v, remedy: r})
		}
	}
	if err := o.locateRepo(); err != nil {
		fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.durationLimit)
	defer cancel()

	svc := &services{repo: o.repo}
	defer svc.close()
	// Its own data directory under the repository's .cache (not
	// SHAREQ_CACHE_DIR, which may be another checkout's, jars only).
	c := &cluster{name: "probe broker", Cluster: brokerprobe.Cluster{Nodes: 1, PortBase: o.ownBrokerPortBase, Dir: filepath.Join(o.repo, ".cache", "kafka-broker-probe")}}
	seeds, err := svc.ensureCluster(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shareq-soak: broker probe:", err)
		return 2
	}
	outDir := filepath.Join(o.repo, ".cache", "broker-probe")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "shareq-soak:", err)
		return 2
	}
	fmt.Printf("shareq-soak: broker probe on %s (Kafka, code %s): share.partition.max.record.locks=%d, share.record.lock.duration.ms=%d, variants %s\n",
		strings.Join(seeds, ","), gitDescribe(o.repo), p.locks, p.lockMs, strings.Join(names(run), ","))
	code := 0
	var verdicts, remedied []string
	for _, j := range jobs {
		v := j.v
		pr := &prober{svc: svc, c: c, seeds: seeds, f: p, v: v, remedy: j.remedy, outDir: outDir}
		verdict, err := pr.run(ctx)
		if pr.remedyResult != "" {
			remedied = append(remedied, pr.remedyResult)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "shareq-soak: broker probe %s: %v\n", v.Name, err)
			verdict = "ERROR"
			code = 2
		}
		if verdict != v.Expect && code == 0 {
			code = 1
		}
		line := fmt.Sprintf("%-20s %-8s (expected %s)", v.Name, verdict, v.Expect)
		verdicts = append(verdicts, line)
		fmt.Printf("probe %s\n", line)
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println("\nshareq-soak: broker probe verdicts:")
	for _, l := range verdicts {
		fmt.Println("  " + l)
	}
	if len(remedies) > 0 {
		fmt.Println("\nshareq-soak: broker probe remedies (variant, remedy, verdict):")
		for _, l := range remedied {
			fmt.Println("  " + l)
		}
	}
	return code
}

func names(vs []brokerprobe.Variant) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

// prober runs one variant.
type prober struct {
	svc    *services
	c      *cluster
	seeds  []string
	f      probeFlags
	v      brokerprobe.Variant
	remedy *probeRemedy // applied after a STALLED verdict instead of the restart
	outDir string

	topic, group string
	topicID      [16]byte
	cl           *kgo.Client // admin and produce
	adm          *kadm.Client
	logFrom      int64
	start        time.Time
	warms        int

	// The member (Driver.M) and what it acquired, accepted and got
	// again.
	*brokerprobe.Driver
	remedyAt     time.Time     // when the remedy began (zero: none)
	firstAfter   time.Duration // from remedyAt to the first acquisition after it
	remedyResult string        // the remedy's result line (tryRemedy)
}

func (pr *prober) logf(format string, args ...any) {
	fmt.Printf("  [%s %5.1fs] %s\n", pr.v.Name, time.Since(pr.start).Seconds(), fmt.Sprintf(format, args...))
}

func (pr *prober) serverLog() string { return filepath.Join(pr.c.Dir, "node-1", "server.log") }

func (pr *prober) run(ctx context.Context) (string, error) {
	pr.start = time.Now()
	pr.logFrom = fileSize(pr.serverLog())
	suffix := strconv.FormatInt(time.Now().UnixMilli()%1e9, 36)
	pr.topic = "probe-" + pr.v.Name + "-" + suffix
	pr.group = pr.topic
	fmt.Printf("\nprobe %s: %s\n", pr.v.Name, pr.v.About)
	var err error
	pr.cl, err = kgo.NewClient(kgo.SeedBrokers(pr.seeds...), kgo.ProducerLinger(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(pr.topic),
		kgo.RetryTimeout(3*time.Minute))
	if err != nil {
		return "", err
	}
	defer pr.cl.Close()
	pr.adm = kadm.NewClient(pr.cl)
	if err := pr.setup(ctx); err != nil {
		return "", err
	}
	pr.Driver = brokerprobe.NewDriver(brokerprobe.NewMember(pr.seeds, pr.group, pr.topic, pr.topicID), pr.logf)
	pr.OnAcquire = func() {
		if !pr.remedyAt.IsZero() && pr.firstAfter == 0 {
			pr.firstAfter = time.Since(pr.remedyAt)
		}
	}
	pr.Report = func(ctx context.Context, when string) { pr.report(ctx, when) }
	defer func() { pr.M.Close() }() // a remedy may replace the member
	if err := pr.M.Join(ctx); err != nil {
		return "", err
	}

	// 1. Acquire what the broker gives, accept all but the held offsets;
	// 2. the crash, then the broker back on its data; 3. the variant's
	// acks of what comes (the re-delivered gap), for a few lock
	// durations (brokerprobe.Driver.MakeStall); then more records, then
	// the watch.
	lock := time.Duration(pr.f.lockMs) * time.Millisecond
	if err := pr.MakeStall(ctx, pr.v, lock, pr.restart); err != nil {
		return "", err
	}
	pr.report(ctx, "after the variant's acks")
	verdict, err := pr.watch(ctx, pr.f.watch)
	if err != nil {
		return "", err
	}
	if verdict == "STALLED" && pr.remedy != nil {
		if err := pr.tryRemedy(ctx); err != nil {
			return verdict, err
		}
	} else if verdict == "STALLED" {
		// Does a restart free it (as in the endurance run)?
		pr.logf("stalled; SIGKILL and restart the broker once more to see whether that frees it")
		if err := pr.svc.stopNode(ctx, pr.c, 1, true); err == nil {
			if err := pr.svc.startNode(ctx, pr.c, 1); err != nil {
				return verdict, err
			}
			pr.warm(ctx)
			pr.M.Reset()
			was := pr.MaxAcquired
			after, err := pr.watch(ctx, pr.f.stallAfter+10*time.Second)
			if err != nil {
				return verdict, err
			}
			pr.logf("after one more restart: %s; highest offset acquired %d (%d at the stall)", after, pr.MaxAcquired, was)
		}
	}
	pr.brokerLog()
	return verdict, nil
}

// restart SIGKILLs the broker and starts it on its data.
func (pr *prober) restart(ctx context.Context) error {
	if err := pr.svc.stopNode(ctx, pr.c, 1, true); err != nil {
		return err
	}
	if err := pr.svc.startNode(ctx, pr.c, 1); err != nil {
		return err
	}
	pr.warm(ctx)
	return nil
}

func (pr *prober) setup(ctx context.Context) error {
	var err error
	if pr.topicID, err = brokerprobe.Prepare(ctx, pr.cl, pr.topic, pr.group, pr.f.locks, pr.f.lockMs); err != nil {
		return err
	}
	pr.warm(ctx)
	// Each batch its own produce request: the records buffered (linger a
	// minute) and flushed together, so they are one log batch.
	if err := brokerprobe.ProduceBatches(ctx, pr.cl, pr.v.Batches); err != nil {
		return err
	}
	n := 0
	for _, size := range pr.v.Batches {
		n += size
	}
	pr.logf("topic %s (1 partition), group %s; produced %d records in %d log batches", pr.topic, pr.group, n, len(pr.v.Batches))
	return nil
}

func (pr *prober) produce(ctx context.Context, from, n int) {
	brokerprobe.Produce(ctx, pr.cl, from, n, func(err error) { pr.logf("produce: %v", err) })
}

// warm makes the broker load SharePartition (one share fetch of a
// scratch group on a scratch topic) and then sets its logger to DEBUG:
// the broker refuses the level of a logger that does not exist yet, and a
// restarted broker has none until a share partition is made.
func (pr *prober) warm(ctx context.Context) {
	pr.warms++
	name := pr.topic + "-warm" + strconv.Itoa(pr.warms)
	resp, err := pr.adm.CreateTopic(ctx, 1, 1, nil, name)
	if err != nil {
		pr.logf("warm-up topic: %v", err)
		return
	}
	m := brokerprobe.NewMember(pr.seeds, name, name, resp.ID)
	if err := m.Join(ctx); err == nil {
		for range 3 {
			if _, err := m.Fetch(ctx, nil); err == nil {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	m.Close()
	for i := range 10 {
		if err := pr.debugLogger(ctx); err == nil {
			return
		} else if i == 9 {
			pr.logf("could not set the SharePartition logger to DEBUG: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// debugLogger sets kafka.server.share.SharePartition to DEBUG on the
// broker (not kept across a restart).
func (pr *prober) debugLogger(ctx context.Context) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBrokerLogger
	res.ResourceName = "1"
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name = "kafka.server.share.SharePartition"
	c.Op = kmsg.IncrementalAlterConfigOpSet
	c.Value = kmsg.StringPtr("DEBUG")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, pr.cl)
	if err == nil && len(resp.Resources) > 0 {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	return err
}

type probeState struct {
	start, lag, logEnd int64
	err                error
}

func (pr *prober) state(ctx context.Context) probeState {
	var s probeState
	s.start, s.lag = -1, -1
	d, err := pr.adm.DescribeShareGroupOffsets(ctx, pr.group)
	if err == nil {
		if g, ok := d[pr.group]; ok && g.Err == nil {
			if o, ok := g.Offsets.Lookup(pr.topic, 0); ok {
				s.start, s.lag, s.err = o.StartOffset, o.Lag, o.Err
			}
		} else if ok {
			err = g.Err
		}
	}
	if err != nil {
		s.err = err
	}
	ends, err := pr.adm.ListEndOffsets(ctx, pr.topic)
	if err == nil {
		if e, ok := ends.Lookup(pr.topic, 0); ok {
			s.logEnd = e.Offset
		}
	}
	return s
}

func (pr *prober) report(ctx context.Context, when string) probeState {
	s := pr.state(ctx)
	errs := ""
	if s.err != nil {
		errs = " (describe: " + s.err.Error() + ")"
	}
	pr.logf("%s: start offset %d, lag %d, log end %d, highest offset acquired %d%s", when, s.start, s.lag, s.logEnd, pr.MaxAcquired, errs)
	return s
}

// watch produces 10 records every 2 s (not in its last 6 s) and fetches,
// accepting all, for d;
// it returns STALLED when records wait and none was acquired and the start
// offset did not move for stallAfter, OK when every record was acquired
// and the lag is 0. (The start offset DescribeShareGroupOffsets gives is
// the one written with the last acks, which can stay a batch behind.)
func (pr *prober) watch(ctx context.Context, d time.Duration) (string, error) {
	end := time.Now().Add(d)
	nextProduce, nextReport := time.Now(), time.Now()
	produced := 0
	lastStart, startSince := int64(-2), time.Now()
	pr.LastAcquire = time.Now()
	var pending []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch
	var s probeState
	for time.Now().Before(end) && ctx.Err() == nil {
		if time.Now().After(nextProduce) && time.Now().Before(end.Add(-6*time.Second)) && produced < 100 {
			ends, _ := pr.adm.ListEndOffsets(ctx, pr.topic)
			from := 0
			if e, ok := ends.Lookup(pr.topic, 0); ok {
				from = int(e.Offset)
			}
			pr.produce(ctx, from, 10)
			_ = pr.cl.Flush(ctx)
			produced += 10
			nextProduce = time.Now().Add(2 * time.Second)
		}
		got, err := pr.Fetch(ctx, pending)
		pending = nil
		if err != nil && !errors.Is(err, brokerprobe.ErrRetry) {
			return "", err
		}
		for _, r := range got {
			for off := r.FirstOffset; off <= r.LastOffset; off++ {
				pending = brokerprobe.AppendAck(pending, off, 1)
				pr.Accepted[off] = true
			}
		}
		if len(pending) > 0 {
			if err := pr.M.Ack(ctx, pending); err != nil {
				pr.logf("ack: %v", err)
			}
			pending = nil
		}
		if time.Now().After(nextReport) {
			s = pr.state(ctx)
			if s.start != lastStart {
				lastStart, startSince = s.start, time.Now()
			}
			pr.logf("watch: start offset %d, lag %d, log end %d, highest acquired %d, empty fetches in a row %d, last acquisition %.1fs ago",
				s.start, s.lag, s.logEnd, pr.MaxAcquired, pr.EmptyFetch, time.Since(pr.LastAcquire).Seconds())
			nextReport = time.Now().Add(3 * time.Second)
			if s.lag == 0 && pr.MaxAcquired == s.logEnd-1 && produced >= 20 {
				return "OK", nil
			}
			waiting := s.logEnd - 1 - pr.MaxAcquired
			if waiting > 0 && time.Since(pr.LastAcquire) > pr.f.stallAfter && time.Since(startSince) > pr.f.stallAfter {
				pr.logf("STALLED: %d records (%d-%d) never acquired, start offset %d for %.0fs, lag %d, %d empty fetches in a row",
					waiting, pr.MaxAcquired+1, s.logEnd-1, s.start, time.Since(startSince).Seconds(), s.lag, pr.EmptyFetch)
				return "STALLED", nil
			}
		}
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	s = pr.report(ctx, "end of the watch")
	if s.lag == 0 && pr.MaxAcquired == s.logEnd-1 {
		return "OK", nil
	}
	return fmt.Sprintf("UNSETTLED(start %d, lag %d, end %d)", s.start, s.lag, s.logEnd), nil
}

// brokerLog writes the broker's log lines of the variant's group (and
// the share coordinator's and errors) to outDir/<variant>.log and prints
// a short excerpt.
func (pr *prober) brokerLog() {
	f, err := os.Open(pr.serverLog())
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(pr.logFrom, 0); err != nil {
		return
	}
	name := pr.v.Name
	if pr.remedy != nil {
		name += "-" + pr.remedy.name
	}
	path := filepath.Join(pr.outDir, name+".log")
	out, err := os.Create(path)
	if err != nil {
		return
	}
	defer out.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var excerpt []string
	for sc.Scan() {
		line := sc.Text()
		if (!strings.Contains(line, pr.group) || strings.Contains(line, pr.group+"-warm")) && !strings.Contains(line, "Kafka Server started") {
			continue
		}
		fmt.Fprintln(out, line)
		if strings.Contains(line, "Initialized share partition") || strings.Contains(line, "max in-flight") ||
			strings.Contains(line, "acquirable gap") || strings.Contains(line, "Kafka Server started") {
			excerpt = append(excerpt, shortLogLine(line, pr.group))
		}
	}
	pr.logf("broker log lines of the group: %s", path)
	// The first and last few.
	if len(excerpt) > 12 {
		excerpt = append(excerpt[:6], append([]string{"    ..."}, excerpt[len(excerpt)-6:]...)...)
	}
	for _, l := range excerpt {
		fmt.Println("    " + l)
	}
}

// shortLogLine shortens a broker log line for the excerpt: the share
// partition's name to "the partition", and of an "Initialized" line only
// the persisted start offset and state batches.
func shortLogLine(line, group string) string {
	if i := strings.Index(line, "Initialized share partition"); i >= 0 {
		st := line[:i]
		if j := strings.Index(line, "startOffset="); j >= 0 {
			rest := line[j:]
			k := strings.Index(rest, ",")
			b := strings.Index(rest, "stateBatches=")
			e := strings.Index(rest, "])])]")
			if k > 0 && b > 0 && e > b {
				return st + "Initialized share partition: persisted " + rest[:k] + ", " + rest[b:e+1]
			}
		}
	}
	if i := strings.Index(line, group+"-"); i >= 0 {
		if j := strings.Index(line[i:], ":"+group+"-0"); j >= 0 {
			line = line[:i] + "the partition" + line[i+j+len(":"+group+"-0"):]
		}
	}
	line = strings.TrimSuffix(line, " (kafka.server.share.SharePartition)")
	if len(line) > 400 {
		line = line[:400] + " ..."
	}
	return line
}
