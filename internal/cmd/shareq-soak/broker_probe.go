package main

// The broker probe (-broker-probe, make soak-broker-probe) checks Apache
// Kafka itself, not shareq: can a share partition stop delivering after a
// broker crash, its start offset standing still while records wait?
//
// It starts a private one-node broker (scripts/kafka-cluster.sh, like
// -own-broker, on -own-broker-port-base + 100), and for each variant makes
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
	"crypto/rand"
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

	"github.com/shareq/shareq/internal/groupcfg"
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
	fs.StringVar(&p.variants, "probe-variants", "", "broker probe: the variants to run, comma-separated (default all: "+strings.Join(probeVariantNames(), ",")+")")
	fs.IntVar(&p.locks, "probe-locks", 100, "broker probe: the groups' share.partition.max.record.locks (100 to 2000 on a default broker)")
	fs.IntVar(&p.lockMs, "probe-lock-ms", 10000, "broker probe: the groups' share.record.lock.duration.ms")
	fs.DurationVar(&p.watch, "probe-watch", 40*time.Second, "broker probe: how long each variant watches the partition after its last step")
	fs.StringVar(&p.remedies, "probe-remedies", "", "broker probe: instead of the freeing restart, try these client remedies on a stalled partition, one per fresh stall of each variant, comma-separated ("+strings.Join(probeRemedyNames(), ",")+"; broker_probe_remedy.go)")
	fs.DurationVar(&p.stallAfter, "probe-stall-after", 20*time.Second, "broker probe: records waiting, none acquired and the start offset still this long is STALLED (keep it above the lock duration)")
}

// ackFn says how the probe acknowledges an offset it acquired, by the
// delivery count the broker gave: 1 accept, 2 release, 3 reject, 0 hold
// (no ack: its lock runs out).
type ackFn func(offset int64, deliveries int16) int8

type probeVariant struct {
	name    string
	about   string
	batches []int // the log batches produced before the first fetch, by record count
	held    func(off int64) bool
	kill    bool         // SIGKILL and restart the broker after the first acks
	after   func() ackFn // the acks after the restart (or, without kill, after the first acks)
	expect  string
}

func accept(int64, int16) int8 { return 1 }

func always(fn ackFn) func() ackFn { return func() ackFn { return fn } }

// firstTime acks offset off with typ the first time it comes (0: no ack),
// and accepts everything else.
func firstTime(off int64, typ int8) func() ackFn {
	return func() ackFn {
		seen := false
		return func(o int64, _ int16) int8 {
			if o == off && !seen {
				seen = true
				return typ
			}
			return 1
		}
	}
}

func probeVariants(locks int) []probeVariant {
	singles := func(n int) []int { return slices.Repeat([]int{1}, n) }
	tens := slices.Repeat([]int{10}, (locks+100)/10)
	first := func(off int64) bool { return off < 10 }
	return []probeVariant{
		{
			name:    "big-batch",
			about:   fmt.Sprintf("10 one-record batches then one of %d: the first fetch acquires the big batch whole, past the limit; offsets 0-4 held at the kill, all accepted after it", locks*3+90),
			batches: append(singles(10), locks*3+90),
			held:    func(off int64) bool { return off < 5 },
			kill:    true, after: always(accept), expect: "STALLED",
		},
		{
			name:    "big-batch-no-kill",
			about:   "big-batch without the kill (control)",
			batches: append(singles(10), locks*3+90),
			held:    func(off int64) bool { return off < 5 },
			after:   always(accept), expect: "OK",
		},
		{
			name:    "full-accept",
			about:   "batches of 10, the in-flight range exactly at the limit at the kill, the first batch (0-9) held; all accepted after the restart (control)",
			batches: tens, held: first, kill: true, after: always(accept), expect: "OK",
		},
		{
			name:    "full-release-first",
			about:   "as full-accept, but after the restart offset 0 of the re-delivered gap is released (1-9 accepted) and accepted when acquired again",
			batches: tens, held: first, kill: true, expect: "STALLED",
			after: firstTime(0, 2),
		},
		{
			name:    "full-timeout-first",
			about:   "as full-release-first, but offset 0 is left unacked until its lock runs out, then acquired again and accepted",
			batches: tens, held: first, kill: true, expect: "STALLED",
			after: firstTime(0, 0),
		},
		{
			name:    "full-release-mid",
			about:   "as full-release-first, but offset 5 is released instead of 0 (control: the start offset moves to 5)",
			batches: tens, held: first, kill: true, expect: "OK",
			after: firstTime(5, 2),
		},
	}
}

func probeVariantNames() []string {
	var names []string
	for _, v := range probeVariants(100) {
		names = append(names, v.name)
	}
	return names
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
	var run []probeVariant
	all := probeVariants(p.locks)
	if p.variants == "" {
		run = all
	} else {
		for name := range strings.SplitSeq(p.variants, ",") {
			i := slices.IndexFunc(all, func(v probeVariant) bool { return v.name == strings.TrimSpace(name) })
			if i < 0 {
				return usage("-probe-variants: no variant %q (have %s)", name, strings.Join(probeVariantNames(), ","))
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
		v      probeVariant
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
	c := &cluster{name: "probe broker", nodes: 1, portBase: o.ownBrokerPortBase, dir: filepath.Join(o.repo, ".cache", "kafka-broker-probe")}
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
			fmt.Fprintf(os.Stderr, "shareq-soak: broker probe %s: %v\n", v.name, err)
			verdict = "ERROR"
			code = 2
		}
		if verdict != v.expect && code == 0 {
			code = 1
		}
		line := fmt.Sprintf("%-20s %-8s (expected %s)", v.name, verdict, v.expect)
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

func names(vs []probeVariant) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.name)
	}
	return out
}

// prober runs one variant.
type prober struct {
	svc    *services
	c      *cluster
	seeds  []string
	f      probeFlags
	v      probeVariant
	remedy *probeRemedy // applied after a STALLED verdict instead of the restart
	outDir string

	topic, group string
	topicID      [16]byte
	cl           *kgo.Client // admin and produce
	adm          *kadm.Client
	m            *shareMember
	logFrom      int64
	start        time.Time

	lastAcquire time.Time
	maxAcquired int64
	emptyFetch  int // empty fetches in a row
	warms       int

	accepted     map[int64]bool // offsets the probe accepted
	redelivered  int            // acquisitions of an accepted offset
	remedyAt     time.Time      // when the remedy began (zero: none)
	firstAfter   time.Duration  // from remedyAt to the first acquisition after it
	remedyResult string         // the remedy's result line (tryRemedy)
}

func (pr *prober) logf(format string, args ...any) {
	fmt.Printf("  [%s %5.1fs] %s\n", pr.v.name, time.Since(pr.start).Seconds(), fmt.Sprintf(format, args...))
}

func (pr *prober) serverLog() string { return filepath.Join(pr.c.dir, "node-1", "server.log") }

func (pr *prober) run(ctx context.Context) (string, error) {
	pr.start = time.Now()
	pr.logFrom = fileSize(pr.serverLog())
	pr.maxAcquired = -1
	pr.accepted = map[int64]bool{}
	suffix := strconv.FormatInt(time.Now().UnixMilli()%1e9, 36)
	pr.topic = "probe-" + pr.v.name + "-" + suffix
	pr.group = pr.topic
	fmt.Printf("\nprobe %s: %s\n", pr.v.name, pr.v.about)
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
	pr.m = newShareMember(pr.seeds, pr.group, pr.topic, pr.topicID)
	defer pr.m.close()
	if err := pr.m.join(ctx); err != nil {
		return "", err
	}

	// 1. Acquire what the broker gives, accept all but the held offsets.
	ranges, err := pr.fetchAll(ctx, 3*time.Second)
	if err != nil {
		return "", err
	}
	pr.logf("before the kill: acquired %s", fmtRanges(ranges))
	var acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch
	var held []int64
	for _, r := range ranges {
		for off := r.FirstOffset; off <= r.LastOffset; off++ {
			if pr.v.held(off) {
				held = append(held, off)
				continue
			}
			acks = appendAck(acks, off, 1)
			pr.accepted[off] = true
		}
	}
	if err := pr.m.ack(ctx, acks); err != nil {
		return "", fmt.Errorf("first acks: %w", err)
	}
	pr.logf("accepted %s; holding %s (acquired, no ack)", fmtAcks(acks), fmtOffsets(held))
	pr.report(ctx, "after the first acks")

	// 2. The crash, then the broker back on its data.
	if pr.v.kill {
		pr.logf("SIGKILL the broker, start it on its data")
		if err := pr.svc.stopNode(ctx, pr.c, 1, true); err != nil {
			return "", err
		}
		if err := pr.svc.startNode(ctx, pr.c, 1); err != nil {
			return "", err
		}
		pr.warm(ctx)
		pr.m.reset()
		pr.logf("broker back")
		pr.report(ctx, "after the restart")
	}

	// 3. The variant's acks of what comes (the re-delivered gap), for a
	// few lock durations, then more records, then the watch.
	lock := time.Duration(pr.f.lockMs) * time.Millisecond
	if err := pr.drive(ctx, pr.v.after(), lock+lock/2+2*time.Second); err != nil {
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
			pr.m.reset()
			was := pr.maxAcquired
			after, err := pr.watch(ctx, pr.f.stallAfter+10*time.Second)
			if err != nil {
				return verdict, err
			}
			pr.logf("after one more restart: %s; highest offset acquired %d (%d at the stall)", after, pr.maxAcquired, was)
		}
	}
	pr.brokerLog()
	return verdict, nil
}

func (pr *prober) setup(ctx context.Context) error {
	resp, err := pr.adm.CreateTopic(ctx, 1, 1, nil, pr.topic)
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	if resp.Err != nil {
		return fmt.Errorf("create topic: %w", resp.Err)
	}
	pr.topicID = resp.ID
	if err := groupcfg.Set(ctx, pr.cl, pr.group, map[string]string{
		groupcfg.AutoOffsetReset:         "earliest",
		groupcfg.PartitionMaxRecordLocks: strconv.Itoa(pr.f.locks),
		groupcfg.RecordLockDurationMs:    strconv.Itoa(pr.f.lockMs),
	}); err != nil {
		return err
	}
	pr.warm(ctx)
	// Each batch its own produce request: the records buffered (linger a
	// minute) and flushed together, so they are one log batch.
	n := 0
	for _, size := range pr.v.batches {
		pr.produce(ctx, n, size)
		if err := pr.cl.Flush(ctx); err != nil {
			return err
		}
		n += size
	}
	pr.logf("topic %s (1 partition), group %s; produced %d records in %d log batches", pr.topic, pr.group, n, len(pr.v.batches))
	return nil
}

func (pr *prober) produce(ctx context.Context, from, n int) {
	for i := range n {
		pr.cl.Produce(ctx, &kgo.Record{Partition: 0, Value: []byte("probe record " + strconv.Itoa(from+i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				pr.logf("produce: %v", err)
			}
		})
	}
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
	m := newShareMember(pr.seeds, name, name, resp.ID)
	if err := m.join(ctx); err == nil {
		for range 3 {
			if _, err := m.fetch(ctx, nil); err == nil {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	m.close()
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

// fetchAll fetches until a fetch acquires nothing or for d, and returns
// the ranges acquired.
func (pr *prober) fetchAll(ctx context.Context, d time.Duration) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	var all []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		got, err := pr.fetch(ctx, nil)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 && len(all) > 0 {
			break
		}
		all = append(all, got...)
	}
	return all, nil
}

// fetch sends one ShareFetch with acks and notes what it acquired.
func (pr *prober) fetch(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	got, err := pr.m.fetch(ctx, acks)
	if err != nil {
		return nil, err
	}
	if len(got) == 0 {
		pr.emptyFetch++
		return nil, nil
	}
	pr.emptyFetch = 0
	pr.lastAcquire = time.Now()
	if !pr.remedyAt.IsZero() && pr.firstAfter == 0 {
		pr.firstAfter = time.Since(pr.remedyAt)
	}
	for _, r := range got {
		pr.maxAcquired = max(pr.maxAcquired, r.LastOffset)
		for off := r.FirstOffset; off <= r.LastOffset; off++ {
			if pr.accepted[off] {
				pr.redelivered++
			}
		}
	}
	return got, nil
}

// drive fetches for d, acking what it acquired with fn; a held offset is
// not acked (its lock runs out and it is acquired again).
func (pr *prober) drive(ctx context.Context, fn ackFn, d time.Duration) error {
	end := time.Now().Add(d)
	var pending []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch
	for time.Now().Before(end) && ctx.Err() == nil {
		got, err := pr.fetch(ctx, pending)
		pending = nil
		if err != nil {
			if errors.Is(err, errProbeRetry) {
				time.Sleep(500 * time.Millisecond)
				continue
			}
			return err
		}
		if len(got) == 0 {
			continue
		}
		var kinds []string
		for _, r := range got {
			for off := r.FirstOffset; off <= r.LastOffset; off++ {
				t := fn(off, r.DeliveryCount)
				if t == 1 {
					pr.accepted[off] = true
				}
				if t != 0 {
					pending = appendAck(pending, off, t)
				}
			}
			kinds = append(kinds, fmt.Sprintf("%d-%d(delivery %d)", r.FirstOffset, r.LastOffset, r.DeliveryCount))
		}
		pr.logf("acquired %s; acks %s", strings.Join(kinds, " "), fmtAcks(pending))
		// Ack at once (ShareAcknowledge), before the next fetch acquires
		// anything, so the order is the variant's.
		if len(pending) > 0 {
			if err := pr.m.ack(ctx, pending); err != nil {
				pr.logf("ack: %v", err)
			}
			pending = nil
		}
	}
	return ctx.Err()
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
	pr.logf("%s: start offset %d, lag %d, log end %d, highest offset acquired %d%s", when, s.start, s.lag, s.logEnd, pr.maxAcquired, errs)
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
	pr.lastAcquire = time.Now()
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
		got, err := pr.fetch(ctx, pending)
		pending = nil
		if err != nil && !errors.Is(err, errProbeRetry) {
			return "", err
		}
		for _, r := range got {
			for off := r.FirstOffset; off <= r.LastOffset; off++ {
				pending = appendAck(pending, off, 1)
				pr.accepted[off] = true
			}
		}
		if len(pending) > 0 {
			if err := pr.m.ack(ctx, pending); err != nil {
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
				s.start, s.lag, s.logEnd, pr.maxAcquired, pr.emptyFetch, time.Since(pr.lastAcquire).Seconds())
			nextReport = time.Now().Add(3 * time.Second)
			if s.lag == 0 && pr.maxAcquired == s.logEnd-1 && produced >= 20 {
				return "OK", nil
			}
			waiting := s.logEnd - 1 - pr.maxAcquired
			if waiting > 0 && time.Since(pr.lastAcquire) > pr.f.stallAfter && time.Since(startSince) > pr.f.stallAfter {
				pr.logf("STALLED: %d records (%d-%d) never acquired, start offset %d for %.0fs, lag %d, %d empty fetches in a row",
					waiting, pr.maxAcquired+1, s.logEnd-1, s.start, time.Since(startSince).Seconds(), s.lag, pr.emptyFetch)
				return "STALLED", nil
			}
		}
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	s = pr.report(ctx, "end of the watch")
	if s.lag == 0 && pr.maxAcquired == s.logEnd-1 {
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
	name := pr.v.name
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

func appendAck(acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch, off int64, typ int8) []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
	if n := len(acks); n > 0 && acks[n-1].LastOffset+1 == off && acks[n-1].AcknowledgeTypes[0] == typ {
		acks[n-1].LastOffset = off
		return acks
	}
	b := kmsg.NewShareAcknowledgeRequestTopicPartitionAcknowledgementBatch()
	b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = off, off, []int8{typ}
	return append(acks, b)
}

func fmtAcks(acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) string {
	if len(acks) == 0 {
		return "none"
	}
	kind := map[int8]string{1: "accept", 2: "release", 3: "reject"}
	var parts []string
	for _, a := range acks {
		parts = append(parts, fmt.Sprintf("%d-%d %s", a.FirstOffset, a.LastOffset, kind[a.AcknowledgeTypes[0]]))
	}
	return strings.Join(parts, ", ")
}

func fmtRanges(rs []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord) string {
	if len(rs) == 0 {
		return "nothing"
	}
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%d-%d", r.FirstOffset, r.LastOffset))
	}
	if len(parts) > 12 {
		parts = append(parts[:6], "...", parts[len(parts)-1])
	}
	return strings.Join(parts, " ") + fmt.Sprintf(" (%d ranges)", len(rs))
}

func fmtOffsets(offs []int64) string {
	if len(offs) == 0 {
		return "nothing"
	}
	return fmt.Sprintf("%d-%d", offs[0], offs[len(offs)-1])
}

// errProbeRetry is a share request that failed for a reason the member
// recovers from (a broker away, a session or membership lost).
var errProbeRetry = errors.New("retry")

// shareMember is one share-group member speaking the protocol itself:
// heartbeats in the background, one share session, explicit acks.
type shareMember struct {
	cl       *kgo.Client // heartbeats
	fcl      *kgo.Client // share fetches and acks: the connection the share session is tied to
	seeds    []string
	group    string
	topic    string
	topicID  [16]byte
	memberID string

	hbStop    chan struct{}
	hbDone    chan struct{}
	hbRunning bool // the heartbeat goroutine was started (join)

	mu         chan struct{} // guards the below (a one-slot semaphore)
	epoch      int32
	assigned   bool
	sessEpoch  int32
	hbInterval time.Duration
}

func newShareMember(seeds []string, group, topic string, topicID [16]byte) *shareMember {
	cl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(5*time.Second))
	fcl, _ := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(5*time.Second))
	return &shareMember{cl: cl, fcl: fcl, seeds: seeds, group: group, topic: topic, topicID: topicID, memberID: newUUID(),
		hbStop: make(chan struct{}), hbDone: make(chan struct{}), mu: make(chan struct{}, 1), hbInterval: 500 * time.Millisecond}
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (m *shareMember) lock()   { m.mu <- struct{}{} }
func (m *shareMember) unlock() { <-m.mu }

// join heartbeats until the member has the partition, then keeps
// heartbeating in the background.
func (m *shareMember) join(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		m.heartbeat(ctx)
		m.lock()
		ok := m.assigned
		m.unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the member got no assignment within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	m.hbRunning = true
	go func() {
		defer close(m.hbDone)
		for {
			select {
			case <-m.hbStop:
				return
			case <-time.After(m.hbInterval):
			}
			m.heartbeat(ctx)
		}
	}()
	return nil
}

func (m *shareMember) heartbeat(ctx context.Context) {
	m.lock()
	epoch := m.epoch
	m.unlock()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID = m.group
	req.MemberID = m.memberID
	req.MemberEpoch = epoch
	if epoch == 0 {
		req.SubscribedTopicNames = []string{m.topic}
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := req.RequestWith(hctx, m.cl)
	if err != nil {
		return
	}
	m.lock()
	defer m.unlock()
	switch err := kerr.ErrorForCode(resp.ErrorCode); {
	case err == nil:
		m.epoch = resp.MemberEpoch
		if resp.HeartbeatIntervalMillis > 0 {
			m.hbInterval = time.Duration(resp.HeartbeatIntervalMillis) * time.Millisecond
		}
		if a := resp.Assignment; a != nil {
			m.assigned = false
			for _, tp := range a.TopicPartitions {
				if tp.TopicID == m.topicID && slices.Contains(tp.Partitions, 0) {
					m.assigned = true
				}
			}
		}
	case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.FencedMemberEpoch):
		m.epoch = 0 // join again, same member id
	}
}

// reset forgets the share session (the broker's went with its restart).
func (m *shareMember) reset() {
	m.lock()
	m.sessEpoch = 0
	m.unlock()
}

func (m *shareMember) close() {
	m.leave()
	m.cl.Close()
	m.fcl.Close()
}

// leave stops the heartbeats and leaves the group (epoch -1); the share
// session and its connection stay. rejoin joins again.
func (m *shareMember) leave() {
	select {
	case <-m.hbStop:
		return
	default:
		close(m.hbStop)
	}
	if m.hbRunning {
		<-m.hbDone
		m.hbRunning = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.GroupID, req.MemberID, req.MemberEpoch = m.group, m.memberID, -1
	_, _ = req.RequestWith(ctx, m.cl)
}

// rejoin joins the group again (epoch 0, same member id) after leave.
func (m *shareMember) rejoin(ctx context.Context) error {
	m.lock()
	m.epoch, m.assigned = 0, false
	m.unlock()
	m.hbStop, m.hbDone = make(chan struct{}), make(chan struct{})
	return m.join(ctx)
}

// reconnect drops the share session's connection (a new fetch client;
// the old one closed) and forgets the session.
func (m *shareMember) reconnect() {
	m.fcl.Close()
	m.fcl, _ = kgo.NewClient(kgo.SeedBrokers(m.seeds...), kgo.RetryTimeout(5*time.Second))
	m.reset()
}

// closeSession closes the share session with a final ShareAcknowledge
// (epoch -1, no acks) on its connection, which stays open.
func (m *shareMember) closeSession(ctx context.Context) error {
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = -1
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(actx).RetriableRequest(actx, req)
	m.reset()
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.(*kmsg.ShareAcknowledgeResponse).ErrorCode)
}

// fetch sends one ShareFetch (opening the session when there is none)
// carrying acks, and returns the ranges it acquired.
func (m *shareMember) fetch(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) ([]kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, error) {
	m.lock()
	sess := m.sessEpoch
	m.unlock()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = sess
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 500, 1, 8<<20
	req.MaxRecords, req.BatchSize = 1000, 1000
	if sess == 0 || len(acks) > 0 {
		t := kmsg.NewShareFetchRequestTopic()
		t.TopicID = m.topicID
		p := kmsg.NewShareFetchRequestTopicPartition()
		p.Partition = 0
		for _, a := range acks {
			b := kmsg.NewShareFetchRequestTopicPartitionAcknowledgementBatch()
			b.FirstOffset, b.LastOffset, b.AcknowledgeTypes = a.FirstOffset, a.LastOffset, a.AcknowledgeTypes
			p.AcknowledgementBatches = append(p.AcknowledgementBatches, b)
		}
		t.Partitions = append(t.Partitions, p)
		req.Topics = append(req.Topics, t)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(fctx).RetriableRequest(fctx, req)
	if err != nil {
		m.reset()
		return nil, errProbeRetry
	}
	r := resp.(*kmsg.ShareFetchResponse)
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		m.reset()
		return nil, fmt.Errorf("%w: share fetch: %v", errProbeRetry, err)
	}
	m.lock()
	m.sessEpoch = sess + 1
	m.unlock()
	var got []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("%w: share fetch partition: %v", errProbeRetry, err)
			}
			if err := kerr.ErrorForCode(p.AcknowledgeErrorCode); err != nil {
				return nil, fmt.Errorf("share fetch acks: %v", err)
			}
			got = append(got, p.AcquiredRecords...)
		}
	}
	return got, nil
}

// ack sends a ShareAcknowledge in the session and checks its answer.
func (m *shareMember) ack(ctx context.Context, acks []kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) error {
	if len(acks) == 0 {
		return nil
	}
	m.lock()
	sess := m.sessEpoch
	m.unlock()
	if sess == 0 {
		return errors.New("no share session to ack in")
	}
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.memberID
	req.ShareSessionEpoch = sess
	t := kmsg.NewShareAcknowledgeRequestTopic()
	t.TopicID = m.topicID
	p := kmsg.NewShareAcknowledgeRequestTopicPartition()
	p.Partition = 0
	p.AcknowledgementBatches = acks
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := m.broker(actx).RetriableRequest(actx, req)
	if err != nil {
		m.reset()
		return err
	}
	r := resp.(*kmsg.ShareAcknowledgeResponse)
	m.lock()
	m.sessEpoch = sess + 1
	m.unlock()
	if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
		return err
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

// broker is the one broker (node 1), on the fetch connection the share
// session is tied to.
func (m *shareMember) broker(context.Context) *kgo.Broker { return m.fcl.Broker(1) }
