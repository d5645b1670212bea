package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/worker"
)

const (
	phaseSingle   = "single"
	phaseCluster3 = "cluster3"

	partitions    = 6
	dlqPartitions = 3
	// workerShutdown is the workers' worker.ShutdownTimeout: shorter than
	// a slow job, so a SIGTERM cancels and releases slow jobs in flight.
	workerShutdown = 3 * time.Second
	// produceTimeout bounds the delivery of one job record, retries
	// included: longer than any broker outage the soak causes.
	produceTimeout = 3 * time.Minute
	// leaderDownFor is how long a stopped cluster node stays down.
	leaderDownFor = 20 * time.Second
)

// jobSpec is one job the soak produces.
type jobSpec struct {
	id   string
	kind string
	ms   int
}

// phase is the state of one phase of the soak.
type phase struct {
	name  string
	o     options
	svc   *services
	rng   *rand.Rand
	seeds []string
	kc    *cluster // the cluster the phase runs on; nil: the shared test broker
	pgURL string
	runID string
	topic string
	dlq   string
	// brokerDLQ is the share group's dead-letter topic on brokers that
	// have one (Kafka 4.4+): the workers take it up by default, and the
	// broker writes every record it archives there. "" before 4.4.
	brokerDLQ string
	group     string
	schema    string
	logDir    string
	lock      time.Duration
	limit     int // the broker's default delivery limit
	// groupLimit is the group's delivery limit: limit, or more with
	// -spare-deliveries.
	groupLimit int
	cl         *kgo.Client
	adm        *kadm.Client
	db         *pgxpool.Pool // search_path = schema
	ev         *events
	fleet      *fleet
	jobs       []jobSpec
	byID       map[string]*jobSpec
	faults     []faultRecord
	faultMu    sync.Mutex

	produced atomic.Int64
	// handed is the index in jobs of the job the producer last handed on
	// (to the client or the outbox), for fault_pause.go.
	handed      atomic.Int64
	produceErrs atomic.Int64
	producedIDs sync.Map // job ID → struct{}, acknowledged by the broker
	locID       sync.Map // "topic/partition/offset" of a produced job → job ID
	added       addedPartitions

	dlqMu   sync.Mutex
	dlqSeen map[string]int // from the tailing consumer

	timings map[string]time.Duration

	killedParking string        // the poison job whose parking delivery was killed
	drainStop     string        // why the drain stopped short
	hitAt         time.Duration // when the fault in progress struck (set by hit)
	silent        *silentRoutes // the slots' proxies for the silent faults (fault_silent.go)
	outbox        *outboxRun    // the outbox path and its relays (relay.go); nil without
	abort         context.CancelCauseFunc

	replayed     map[string]bool // healthy jobs replayed from the DLQ
	ext          phaseExt        // the sampler's, the overload phase's and the endurance mode's state (sampler.go)
	replayErr    error
	replayGroups []string
}

func runPhase(ctx context.Context, svc *services, o options, name string, seed uint64) (*report, error) {
	o.workers = o.frozen.workersFor(name, o.workers)
	p := &phase{
		name: name, o: o, svc: svc,
		rng:     rand.New(rand.NewPCG(seed, seed^0x5eed)),
		dlqSeen: map[string]int{},
		timings: map[string]time.Duration{},
	}
	p.o = p.phaseOptions()
	o = p.o
	phaseStart := time.Now()
	fmt.Printf("\n=== phase %s (seed %d, %d worker processes)\n", name, seed, o.workers)
	outer := ctx
	ctx, p.abort = context.WithCancelCause(ctx)
	defer p.abort(nil)

	var err error
	if p.pgURL, err = svc.ensurePG(ctx); err != nil {
		return nil, err
	}
	switch {
	case name == phaseCluster3:
		p.kc = cluster3()
	case o.ownBroker:
		p.kc = ownBroker(svc.cacheDir(), o.ownBrokerPortBase)
	}
	if p.kc != nil {
		if p.seeds, err = svc.ensureCluster(ctx, p.kc); err != nil {
			return nil, err
		}
	} else {
		addr, err := svc.ensureKafka(ctx)
		if err != nil {
			return nil, err
		}
		p.seeds = []string{addr}
	}
	p.timings["services"] = time.Since(phaseStart)

	p.runID = fmt.Sprintf("%s-%s-%d", name, time.Now().Format("150405"), seed)
	p.topic = "soak-" + p.runID
	p.dlq = p.topic + dlq.TopicSuffix
	p.group = "soak-" + p.runID
	p.schema = "soak_" + strings.NewReplacer("-", "_").Replace(p.runID)
	p.logDir = filepath.Join(svc.cacheDir(), "soak", p.runID)
	if err := os.MkdirAll(p.logDir, 0o755); err != nil {
		return nil, err
	}
	evLog, err := os.Create(filepath.Join(p.logDir, "events.log"))
	if err != nil {
		return nil, err
	}
	defer evLog.Close()
	p.ev = newEvents(os.Stdout, evLog)
	fmt.Printf("topic %s, group %s, schema %s, brokers %s\nlogs: %s\n", p.topic, p.group, p.schema, strings.Join(p.seeds, ","), p.logDir)

	if err := p.setup(ctx); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	defer p.cl.Close()
	defer p.db.Close()

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	workerDeadline, _ := ctx.Deadline()
	if p.ext.smp, err = p.newSampler(); err != nil {
		return nil, err
	}
	p.fleet = newFleet(exe, append([]string{
		"-brokers", strings.Join(p.seeds, ","),
		"-group", p.group,
		"-topic", p.topic,
		"-pg", p.pgURL,
		"-schema", p.schema,
		"-concurrency", strconv.Itoa(o.concurrency),
		"-shutdown-timeout", workerShutdown.String(),
		"-spare", strconv.Itoa(p.spare()),
		"-group-limit", strconv.Itoa(p.workerGroupLimit()),
		"-webhook-flag", p.webhookFlag(),
		"-deadline", workerDeadline.Add(time.Minute).Format(time.RFC3339Nano),
	}, p.extraWorkerArgs()...), p.logDir, p.ev, o.workers)
	p.batchSlots()
	closeRoutes, err := p.routeSilent()
	defer closeRoutes()
	if err != nil {
		return nil, fmt.Errorf("silent-network proxies: %w", err)
	}
	fleetCtx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFleet()
	p.fleet.start(fleetCtx)
	if err := p.startRelays(fleetCtx, exe, workerDeadline); err != nil {
		return nil, err
	}
	p.ext.smp.run(fleetCtx)
	defer p.ext.smp.finish(context.WithoutCancel(ctx))
	stopped := false
	stopWorkers := func() {
		if !stopped {
			stopped = true
			p.stopRelays()
			p.fleet.stop(workerShutdown + 15*time.Second)
		}
	}
	defer stopWorkers()

	tailCtx, stopTail := context.WithCancel(ctx)
	var tailWG sync.WaitGroup
	tailWG.Add(1)
	go func() { defer tailWG.Done(); p.tailDLQ(tailCtx) }()
	defer func() { stopTail(); tailWG.Wait() }()

	if err := p.prepare(ctx); err != nil { // the overload phase's calibration
		return nil, err
	}
	runStart := time.Now()
	p.ev.start = runStart
	window := time.Duration(float64(len(p.jobs)) / o.rate * float64(time.Second))
	schedule := p.schedule(window)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.produce(ctx, runStart) }()
	go func() { defer wg.Done(); p.inject(ctx, runStart, schedule) }()
	progressCtx, stopProgress := context.WithCancel(ctx)
	var progressWG sync.WaitGroup
	progressWG.Add(1)
	go func() { defer progressWG.Done(); p.progress(progressCtx) }()
	defer func() { stopProgress(); progressWG.Wait() }()
	wg.Wait()
	p.timings["produce+faults"] = time.Since(runStart)
	p.ev.note("production and faults done: %d produced, %d produce errors", p.produced.Load(), p.produceErrs.Load())

	drainStart := time.Now()
	complete := p.drain(ctx)
	p.timings["drain"] = time.Since(drainStart)
	if complete {
		p.settle(ctx)
		// Healthy jobs parked by an outage are not lost: an operator
		// replays them. Do that, with dlq.Replay, and wait for them.
		if replayed, err := p.replayHealthy(ctx); err != nil {
			p.ev.note("replay of parked healthy jobs: %v", err)
			p.replayErr = err
		} else if len(replayed) > 0 {
			p.replayed = replayed
			complete = p.waitEffects(ctx, replayed)
			if complete {
				p.settle(ctx)
			}
		}
	}
	if !complete {
		p.ev.note("NOT every job accounted for: %s", p.drainStop)
	}
	p.ext.smp.finish(ctx)
	stopWorkers()
	p.timings["run"] = time.Since(runStart)

	vctx, vcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer vcancel()
	rep, err := p.verify(vctx)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep.complete = complete
	rep.sections = p.sections()
	if s := p.outboxSection(vctx); s != nil {
		rep.sections = append(rep.sections, s)
	}
	rep.interrupted = errors.Is(outer.Err(), context.Canceled)
	p.timings["phase"] = time.Since(phaseStart)
	rep.timings = p.timings
	if rep.ok() && !o.keep {
		p.cleanup(vctx)
	} else {
		rep.kept = fmt.Sprintf("kept for inspection: topic %s, DLQ %s, group %s, schema %s", p.topic, strings.Join(p.dlqTopics(), " and "), p.group, p.schema)
	}
	return rep, nil
}

// awaitTopics waits until every broker's own metadata lists the topics
// with all their partitions led. A broker learns of a new topic from the
// controller some time after CreateTopics returns: a worker whose start-up
// check asks another broker meanwhile finds the topic missing and exits.
func (p *phase) awaitTopics(ctx context.Context, topics map[string]int32) error {
	brokers, err := p.adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("list brokers: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, b := range brokers {
		for {
			missing, err := p.missingOn(ctx, b.NodeID, topics)
			if err == nil && len(missing) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("broker %d does not list topics %v a minute after their creation (last error: %v)", b.NodeID, missing, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// missingOn returns the topics that broker id's metadata does not list
// with every partition led.
func (p *phase) missingOn(ctx context.Context, id int32, topics map[string]int32) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest()
	for name := range topics {
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, t)
	}
	resp, err := req.RequestWith(ctx, p.cl.Broker(int(id)))
	if err != nil {
		return slices.Sorted(maps.Keys(topics)), err
	}
	ready := map[string]bool{}
	for _, t := range resp.Topics {
		led := 0
		for _, pt := range t.Partitions {
			if pt.ErrorCode == 0 && pt.Leader >= 0 {
				led++
			}
		}
		if t.ErrorCode == 0 && t.Topic != nil && int32(led) >= topics[*t.Topic] {
			ready[*t.Topic] = true
		}
	}
	var missing []string
	for name := range topics {
		if !ready[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// setup creates the topics, the group's configuration, the schema, and the
// job plan.
func (p *phase) setup(ctx context.Context) error {
	var err error
	p.cl, err = kgo.NewClient(kgo.SeedBrokers(p.seeds...), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RecordDeliveryTimeout(produceTimeout), kgo.RecordPartitioner(enqueue.Partitioner()))
	if err != nil {
		return err
	}
	p.adm = kadm.NewClient(p.cl)
	rf := int16(1)
	if len(p.seeds) >= 3 {
		rf = 3
	}
	topics := []struct {
		name    string
		parts   int32
		configs map[string]*string
	}{{p.topic, partitions, nil}, {p.dlq, dlqPartitions, nil}}
	// Kafka 4.4+ describes the group config errors.deadletterqueue.topic.name:
	// create the group's dead-letter topic, which the workers take up.
	if known, err := groupcfg.Describe(ctx, p.cl, p.group, groupcfg.DLQTopicName); err == nil {
		if _, ok := known[groupcfg.DLQTopicName]; ok {
			p.brokerDLQ = worker.BrokerDLQTopic(p.group)
			topics = append(topics, struct {
				name    string
				parts   int32
				configs map[string]*string
			}{p.brokerDLQ, dlqPartitions, map[string]*string{groupcfg.TopicDLQGroupEnable: kadm.StringPtr("true")}})
		}
	}
	names := make(map[string]int32, len(topics))
	for _, t := range topics {
		if _, err := p.adm.CreateTopic(ctx, t.parts, rf, t.configs, t.name); err != nil {
			return fmt.Errorf("create topic %s: %w", t.name, err)
		}
		names[t.name] = t.parts
	}
	if p.o.healStalls {
		// The heal reads the members' statuses; the topic is the
		// cluster's, shared by the phases and runs on it.
		if err := p.ensureStatusTopic(ctx, rf); err != nil {
			return err
		}
	}
	if err := p.awaitTopics(ctx, names); err != nil {
		return err
	}
	if err := groupcfg.Set(ctx, p.cl, p.group, map[string]string{groupcfg.AutoOffsetReset: "earliest"}); err != nil {
		return err
	}
	bc, err := groupcfg.Broker(ctx, p.cl, groupcfg.BrokerRecordLockDurationMs, groupcfg.BrokerDeliveryCountLimit)
	if err != nil {
		return err
	}
	ms, _ := strconv.Atoi(bc[groupcfg.BrokerRecordLockDurationMs])
	p.lock = time.Duration(ms) * time.Millisecond
	p.limit, _ = strconv.Atoi(bc[groupcfg.BrokerDeliveryCountLimit])
	if p.lock <= 0 || p.limit <= 0 {
		return fmt.Errorf("broker configs: lock duration %v, delivery limit %d", p.lock, p.limit)
	}
	// The broker archives at the group's limit; with -spare-deliveries the
	// workers raise it (worker.GroupDeliveryLimit, before they join) and
	// park at the broker default, leaving n deliveries that can be lost
	// to a crash or a stop without losing the job.
	p.groupLimit = p.limit + p.o.spareDeliveries

	admin, err := pgxpool.New(ctx, p.pgURL)
	if err != nil {
		return err
	}
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+p.schema)
	admin.Close()
	if err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(p.pgURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = p.schema
	if p.db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	if err := migrations.Up(ctx, p.db); err != nil {
		return err
	}
	// No key on job_id: a second effect of a job is stored, and counted.
	if _, err := p.db.Exec(ctx, `CREATE TABLE soak_effects (
		job_id   text        NOT NULL,
		kind     text        NOT NULL,
		worker   text        NOT NULL,
		pid      int         NOT NULL,
		delivery int         NOT NULL,
		part     int         NOT NULL,
		off      bigint      NOT NULL,
		at       timestamptz NOT NULL DEFAULT clock_timestamp()
	)`); err != nil {
		return fmt.Errorf("create soak_effects: %w", err)
	}

	p.jobs = planJobs(p.rng, p.o.jobs, p.runID, p.o.poisonPct, p.o.slowPct, int((p.lock + 2*time.Second).Milliseconds()))
	if p.o.killParking {
		// Long enough for the driver to see a parking delivery start and
		// kill its worker before the park is done.
		for i := range p.jobs {
			if p.jobs[i].kind == kindPoison {
				p.jobs[i].ms = 300
			}
		}
	}
	p.byID = make(map[string]*jobSpec, len(p.jobs))
	for i := range p.jobs {
		p.byID[p.jobs[i].id] = &p.jobs[i]
	}
	fmt.Printf("lock duration %v, delivery limit %d (group %d, parked on delivery %d); jobs: %d quick, %d slow (%v each), %d poison\n",
		p.lock, p.limit, p.groupLimit, p.parkAt(), countKind(p.jobs, kindQuick), countKind(p.jobs, kindSlow), p.lock+2*time.Second, countKind(p.jobs, kindPoison))
	return nil
}

// planJobs makes n jobs: poisonPct and slowPct percent (at least one each)
// of poison and slow jobs at random positions, the rest quick.
func planJobs(rng *rand.Rand, n int, runID string, poisonPct, slowPct float64, slowMS int) []jobSpec {
	atLeastOne := func(pct float64) int {
		k := int(float64(n)*pct/100 + 0.5)
		if pct > 0 && k == 0 {
			k = 1
		}
		return k
	}
	poison, slow := atLeastOne(poisonPct), atLeastOne(slowPct)
	jobs := make([]jobSpec, n)
	for i := range jobs {
		jobs[i] = jobSpec{id: fmt.Sprintf("%s-%06d", runID, i), kind: kindQuick, ms: 1 + rng.IntN(5)}
	}
	perm := rng.Perm(n)
	for i, j := range perm[:poison+slow] {
		if i < poison {
			jobs[j].kind, jobs[j].ms = kindPoison, 1+rng.IntN(3)
		} else {
			jobs[j].kind, jobs[j].ms = kindSlow, slowMS
		}
	}
	return jobs
}

func countKind(jobs []jobSpec, kind string) int {
	n := 0
	for _, j := range jobs {
		if j.kind == kind {
			n++
		}
	}
	return n
}

// produce writes the jobs at the configured rate, from runStart.
func (p *phase) produce(ctx context.Context, runStart time.Time) {
	interval := time.Duration(float64(time.Second) / p.produceRate())
	var wg sync.WaitGroup
	for i := p.ext.produceFrom; i < len(p.jobs); i++ {
		j := &p.jobs[i]
		if d := time.Until(runStart.Add(time.Duration(i-p.ext.produceFrom) * interval)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		p.handed.Store(int64(i))
		if p.outbox != nil && p.outbox.jobs[j.id] {
			wg.Go(func() { p.enqueueOutbox(ctx, j, payload{Kind: j.kind, SleepMS: j.ms}) })
			continue
		}
		v, _ := json.Marshal(payload{Kind: j.kind, SleepMS: j.ms})
		rec := &kgo.Record{
			Topic:   p.topic,
			Key:     []byte(j.id),
			Value:   v,
			Headers: append([]kgo.RecordHeader{{Key: handler.JobIDHeader, Value: []byte(j.id)}}, p.ext.padding...),
		}
		wg.Add(1)
		p.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				p.produceErrs.Add(1)
				p.ev.note("produce %s failed: %v", j.id, err)
				return
			}
			p.producedIDs.Store(j.id, struct{}{})
			p.locID.Store(fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), j.id)
			p.produced.Add(1)
		})
	}
	// Every record ends within produceTimeout (the client's record
	// delivery timeout), so its callback runs; an interrupt stops the wait
	// sooner, and the records still buffered fail when the client closes.
	if err := p.cl.Flush(ctx); err != nil {
		p.ev.note("producer flush: %v", err)
		return
	}
	wg.Wait()
}

func (p *phase) countEffects(ctx context.Context) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int64
	err := p.db.QueryRow(cctx, "SELECT count(*) FROM soak_effects").Scan(&n)
	return n, err
}

// dlqTopics are the topics jobs can be dead-lettered in: the workers'
// DLQ topic, and the group's dead-letter topic on the broker if any.
func (p *phase) dlqTopics() []string {
	if p.brokerDLQ != "" {
		return []string{p.dlq, p.brokerDLQ}
	}
	return []string{p.dlq}
}

// dlqJobID is the job ID of a DLQ record. The broker's dead-letter
// records carry no headers: their job is found by the source location it
// was produced at (or, for a job replayed since, by its key, the job ID,
// which the broker copies).
func (p *phase) dlqJobID(pk *dlq.Parked) string {
	if pk.Broker && !pk.Restored {
		if id, ok := p.locID.Load(pk.JobID()); ok {
			return id.(string)
		}
		if len(pk.Key) > 0 {
			return string(pk.Key)
		}
	}
	return pk.JobID()
}

// listDLQ reads every DLQ topic with dlq.List.
func (p *phase) listDLQ(ctx context.Context, cl *kgo.Client) ([]dlq.Parked, error) {
	var out []dlq.Parked
	for _, t := range p.dlqTopics() {
		ps, err := dlq.List(ctx, cl, t, dlq.Filter{}, 0)
		if err != nil {
			return nil, fmt.Errorf("dlq.List %s: %w", t, err)
		}
		out = append(out, ps...)
	}
	return out, nil
}

// tailDLQ reads the DLQ topics as they grow, for the progress and drain
// checks. (The final check reads them again with dlq.List.)
func (p *phase) tailDLQ(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.seeds...), kgo.ConsumeTopics(p.dlqTopics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		p.ev.note("DLQ tail: %v", err)
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			pk, err := dlq.Parse(r)
			if err != nil {
				return
			}
			p.dlqMu.Lock()
			p.dlqSeen[p.dlqJobID(&pk)]++
			p.dlqMu.Unlock()
		})
	}
}

// accounted returns how many produced jobs have an effect row or a DLQ
// record, and the parts of that count.
func (p *phase) accounted(ctx context.Context) (total, effects, parked int, err error) {
	p.dlqMu.Lock()
	ids := make([]string, 0, len(p.dlqSeen))
	for id := range p.dlqSeen {
		ids = append(ids, id)
	}
	p.dlqMu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var both int
	err = p.db.QueryRow(cctx, `SELECT count(DISTINCT job_id), count(DISTINCT job_id) FILTER (WHERE job_id = ANY($1)) FROM soak_effects`, ids).Scan(&effects, &both)
	if err != nil {
		return 0, 0, 0, err
	}
	return effects + len(ids) - both, effects, len(ids), nil
}

func (p *phase) progress(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		total, effects, parked, err := p.accounted(ctx)
		p.ev.mu.Lock()
		dups, renew := sumMap(p.ev.dups), p.ev.renewOK
		p.ev.mu.Unlock()
		if err != nil {
			p.ev.note("progress: produced %d/%d; database unavailable (%v)", p.produced.Load(), len(p.jobs), firstLine(err))
			continue
		}
		p.ev.note("progress: produced %d/%d, accounted %d (effects %d, DLQ %d), duplicates absorbed %d, renewals %d",
			p.produced.Load(), len(p.jobs), total, effects, parked, dups, renew)
	}
}

// drain waits until every produced job is accounted for, or ctx ends, or
// the broker has had nothing left to deliver for a while (the share group's
// lag is 0 on every partition) while jobs are still unaccounted for: those
// are lost, and waiting longer would not find them.
func (p *phase) drain(ctx context.Context) bool {
	want := int(p.produced.Load())
	var last int
	var idleSince time.Time
	idleFor := 2*p.lock + 5*time.Second
	for {
		total, _, _, err := p.accounted(ctx)
		if err == nil {
			last = total
			if total >= want {
				return true
			}
		}
		if p.lagZero(ctx) && p.outboxEmpty(ctx) {
			if idleSince.IsZero() {
				idleSince = time.Now()
			}
			if time.Since(idleSince) > idleFor {
				p.drainStop = fmt.Sprintf("the broker had nothing left to deliver for %v with %d of %d jobs accounted for", idleFor, last, want)
				p.ev.note("drain stopped: %s", p.drainStop)
				return false
			}
		} else {
			idleSince = time.Time{}
		}
		select {
		case <-ctx.Done():
			p.drainStop = fmt.Sprintf("%v with %d of %d jobs accounted for", stopCause(ctx), last, want)
			p.ev.note("drain stopped: %s", p.drainStop)
			return false
		case <-time.After(time.Second):
		}
	}
}

// lagZero reports whether the broker says the group has nothing left on
// any partition of the job topic: no record available or in flight.
func (p *phase) lagZero(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := p.adm.DescribeShareGroupOffsets(cctx, p.group)
	if err != nil {
		return false
	}
	g, ok := offs[p.group]
	if !ok || g.Err != nil {
		return false
	}
	n, zero := 0, true
	g.Offsets.Each(func(o kadm.ShareOffset) {
		if o.Topic != p.topic {
			return
		}
		n++
		if o.Err != nil || o.Lag != 0 {
			zero = false
		}
	})
	return zero && n == partitions+int(p.added.n.Load())
}

// settle lets late deliveries (a lock that ran out just now, a released
// job delivered again) land, so that a double effect shows.
func (p *phase) settle(ctx context.Context) {
	d := p.lock + 3*time.Second
	p.ev.note("every job accounted for; settling %v for late deliveries", d)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// replayHealthy replays, one dlq.Replay call each, the DLQ records of
// non-poison jobs that have no effect: jobs that an outage made fail on
// every delivery. It returns the replayed job IDs.
func (p *phase) replayHealthy(ctx context.Context) (map[string]bool, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.seeds...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	parked, err := p.listDLQ(ctx, cl)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, pk := range parked {
		if j, ok := p.byID[p.dlqJobID(&pk)]; ok && j.kind != kindPoison && pk.Err == nil {
			ids = append(ids, j.id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := p.db.Query(ctx, "SELECT DISTINCT job_id FROM soak_effects WHERE job_id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for _, id := range ran {
		done[id] = true
	}
	out := map[string]bool{}
	for _, pk := range parked {
		id := p.dlqJobID(&pk)
		if j, ok := p.byID[id]; !ok || j.kind == kindPoison || pk.Err != nil || done[id] || out[id] || pk.Replayed() {
			continue // a replayed record is not replayed again (its job may be on its way)
		}
		group := fmt.Sprintf("%s-replay-%d-%d", p.group, pk.Partition, pk.Offset)
		p.replayGroups = append(p.replayGroups, group)
		st, err := dlq.Replay(ctx, cl, pk.Topic,
			dlq.ReplayFilter(dlq.Filter{Partitions: []int32{pk.Partition}, Offsets: dlq.OffsetRange{From: pk.Offset, End: pk.Offset + 1}}),
			dlq.ReplayProgressGroup(group),
		)
		if err != nil {
			return out, fmt.Errorf("replay %s (%s): %w", id, pk.Location(), err)
		}
		if st.Replayed != 1 {
			return out, fmt.Errorf("replay %s (%s): replayed %d records, want 1", id, pk.Location(), st.Replayed)
		}
		out[id] = true
		p.ev.note("replayed healthy job %s from %s (parked: %s)", id, pk.Location(), pk.Reason)
	}
	return out, nil
}

// waitEffects waits until every job in ids has an effect row, or ctx ends.
func (p *phase) waitEffects(ctx context.Context, ids map[string]bool) bool {
	list := slices.Collect(maps.Keys(ids))
	for {
		var n int
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.db.QueryRow(cctx, "SELECT count(DISTINCT job_id) FROM soak_effects WHERE job_id = ANY($1)", list).Scan(&n)
		cancel()
		if err == nil && n == len(list) {
			p.ev.note("all %d replayed jobs ran", n)
			return true
		}
		select {
		case <-ctx.Done():
			p.drainStop = fmt.Sprintf("%v with %d of %d replayed jobs run", stopCause(ctx), n, len(list))
			p.ev.note("replayed jobs: %d of %d ran before %v", n, len(list), ctx.Err())
			return false
		case <-time.After(time.Second):
		}
	}
}

// cleanup removes a passing phase's topics, group and schema.
func (p *phase) cleanup(ctx context.Context) {
	if _, err := p.adm.DeleteTopics(ctx, append([]string{p.topic}, p.dlqTopics()...)...); err != nil {
		p.ev.note("cleanup: delete topics: %v", err)
	}
	for _, g := range append([]string{p.group}, p.replayGroups...) {
		if _, err := p.adm.DeleteGroup(ctx, g); err != nil {
			p.ev.note("cleanup: delete group %s: %v", g, err)
		}
	}
	if _, err := p.db.Exec(ctx, "DROP SCHEMA "+p.schema+" CASCADE"); err != nil {
		p.ev.note("cleanup: drop schema: %v", err)
	}
}

// stopCause says why ctx ended.
func stopCause(ctx context.Context) string {
	switch err := context.Cause(ctx); {
	case errors.Is(err, context.DeadlineExceeded):
		return "the time limit came"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	default:
		return fmt.Sprintf("stopped (%v)", err)
	}
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
