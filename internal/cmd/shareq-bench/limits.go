package main

// The key-limit scenarios (issue 30): webhook-like jobs that call HTTP
// destinations served in this process, limited per destination host with
// worker.KeyLimit.
//
// isolation: healthy (50 ms), slow (past the HTTP timeout) and broken
// (500) destinations interleaved, Concurrency 10 and 2 per host, against
// the same healthy jobs run alone: the healthy jobs' p99 produce-to-done
// with the others over alone, records that spent a delivery without a
// run, and the broken jobs' runs before they were parked.
//
// breaker: five destinations under load, one of them down (503, which the
// handler answers with handler.KeyUnavailable) for a while: the down
// destination's deliveries spent, the other four's rate while it is down
// over their rate before, and the breaker's Warn and Info lines.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// Settings shared by the key-limit scenarios.
const (
	limitsConcurrency = 10 // the worker's handler slots
	limitsPerHost     = 2  // Keys.Concurrency
	limitsHealthyDur  = 50 * time.Millisecond
	limitsHTTPTimeout = time.Second
	limitsSlowDur     = 3 * time.Second // a slow destination's answer: past the HTTP timeout
	limitsPartitions  = 6
	limitsHostHeader  = "host"
	limitsRetryDelay  = 500 * time.Millisecond // the worker's retry backoff, short to bound the run
)

// destKind is how a destination answers.
type destKind uint8

const (
	destHealthy destKind = iota // 204 after limitsHealthyDur
	destSlow                    // after limitsSlowDur: the client gives up first
	destBroken                  // 500 at once
	destFlaky                   // healthy, or 503 while down
)

// dest is one destination: an HTTP server in this process.
type dest struct {
	name string
	kind destKind
	srv  *httptest.Server
	down atomic.Bool // destFlaky: answering 503
}

func startDest(name string, kind destKind) *dest {
	d := &dest{name: name, kind: kind}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait := limitsHealthyDur
		switch {
		case d.kind == destSlow:
			wait = limitsSlowDur
		case d.kind == destBroken:
			w.WriteHeader(http.StatusInternalServerError)
			return
		case d.kind == destFlaky && d.down.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	return d
}

// limitJob is one job's record value: when it was produced, its index
// and its destination's index.
func limitJob(index int, dest int) []byte {
	v := make([]byte, 13)
	binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
	binary.BigEndian.PutUint32(v[8:], uint32(index))
	v[12] = byte(dest)
	return v
}

func decodeLimitJob(v []byte) (produced time.Time, index, dest int, err error) {
	if len(v) != 13 {
		return time.Time{}, 0, 0, fmt.Errorf("job value: %d bytes, want 13", len(v))
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v))), int(binary.BigEndian.Uint32(v[8:])), int(v[12]), nil
}

// jobTrace is what happened to one job.
type jobTrace struct {
	dest     int
	produced time.Time
	runs     int
	lostRuns int       // runs that came on a delivery past the one a run would explain
	maxCount int32     // the highest delivery count its runs saw
	done     time.Time // when it succeeded or was parked
	outcome  worker.Outcome
	limit    int32 // the delivery limit its runs saw
}

// limitRun is one run of a key-limit scenario: the jobs, traced.
type limitRun struct {
	mu          sync.Mutex
	jobs        map[int]*jobTrace
	want        int
	ended       int
	all         chan struct{}
	expired     atomic.Int64 // jobs released without a run: their lock ran out (ErrLockExpired, ErrLockLost)
	logs        lineCounter
	stats       atomic.Pointer[worker.MemberStats] // the worker's last
	peakWaiting atomic.Int64                       // the most jobs waiting for their keys in a MemberStats
}

// MemberStats keeps the worker's last snapshot (worker.MemberObserver).
func (r *limitRun) MemberStats(s worker.MemberStats) {
	r.stats.Store(&s)
	for {
		p := r.peakWaiting.Load()
		if int64(s.Waiting) <= p || r.peakWaiting.CompareAndSwap(p, int64(s.Waiting)) {
			return
		}
	}
}

// unexplained is how many records the worker acquired beyond one per job
// and one per release: deliveries spent without a run (a lock that ran
// out while the job waited), from the worker's last MemberStats.
func (r *limitRun) unexplained() int64 {
	s := r.stats.Load()
	if s == nil {
		return -1
	}
	return s.Fetched - int64(r.want) - s.Acks[worker.AckRelease]
}

func newLimitRun(want int) *limitRun {
	return &limitRun{jobs: make(map[int]*jobTrace, want), want: want, all: make(chan struct{})}
}

func (r *limitRun) trace(index, dest int, produced time.Time) *jobTrace {
	t := r.jobs[index]
	if t == nil {
		t = &jobTrace{dest: dest, produced: produced}
		r.jobs[index] = t
	}
	return t
}

// ran notes a run of job on its delivery.
func (r *limitRun) ran(job *handler.Job) {
	produced, index, d, err := decodeLimitJob(job.Value)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trace(index, d, produced)
	t.runs++
	t.limit = job.DeliveryLimit
	t.maxCount = max(t.maxCount, job.DeliveryCount)
	if int(job.DeliveryCount) > t.runs {
		t.lostRuns = int(job.DeliveryCount) - t.runs
	}
}

// JobFinished notes a job's end (worker.Observer).
func (r *limitRun) JobFinished(job *handler.Job, res worker.Result) {
	if errors.Is(res.Err, worker.ErrLockExpired) || errors.Is(res.Err, worker.ErrLockLost) {
		r.expired.Add(1)
	}
	if !res.Final {
		return
	}
	produced, index, d, err := decodeLimitJob(job.Value)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trace(index, d, produced)
	if !t.done.IsZero() {
		return
	}
	t.done, t.outcome = time.Now(), res.Outcome
	r.ended++
	if r.ended == r.want {
		close(r.all)
	}
}

func (r *limitRun) JobStarted(*handler.Job)         {}
func (r *limitRun) LockRenewed(*handler.Job, error) {}
func (r *limitRun) AckFailed(string, int32, error)  {}

// snapshot returns the jobs' traces by index.
func (r *limitRun) snapshot() map[int]jobTrace {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]jobTrace, len(r.jobs))
	for i, t := range r.jobs {
		out[i] = *t
	}
	return out
}

// wait waits for every job to end, or timeout.
func (r *limitRun) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-r.all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("%w: %d of %d jobs ended in %v", errTimeout, r.ended, r.want, timeout)
	}
}

// lineCounter is a slog handler that counts the worker's lines by
// message.
type lineCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[r.Message]++
	return nil
}
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *lineCounter) WithGroup(string) slog.Handler      { return c }

// count returns the lines whose message starts with prefix.
func (c *lineCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.n {
		if strings.HasPrefix(m, prefix) {
			n += k
		}
	}
	return n
}

// deliverFunc is the webhook handler of the scenarios: a POST to the
// job's destination within limitsHTTPTimeout. A 5xx is down (the key's
// breaker) when fiveXXDown, else a retryable failure, as are timeouts.
func deliverFunc(run *limitRun, dests []*dest, client *http.Client, fiveXXDown bool) handler.Handler {
	return handler.Func(func(ctx context.Context, job *handler.Job) error {
		_, _, d, err := decodeLimitJob(job.Value)
		if err != nil || d >= len(dests) {
			return handler.Permanent(fmt.Errorf("bad job: %v", err))
		}
		run.ran(job)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, dests[d].srv.URL, nil)
		if err != nil {
			return handler.Permanent(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", dests[d].name, err)
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300:
			return nil
		case resp.StatusCode >= 500 && fiveXXDown:
			return handler.KeyUnavailable(fmt.Errorf("%s answered %s", dests[d].name, resp.Status))
		}
		return fmt.Errorf("%s answered %s", dests[d].name, resp.Status)
	})
}

// limitWorker runs a worker of the scenarios on topic until stop: the
// webhook handler behind the dlq middleware, a key limit per host.
func limitWorker(ctx context.Context, c *cluster, topic, dlqTopic, group string, run *limitRun, h handler.Handler) (stop func() error, err error) {
	park, err := dlq.Middleware(c.cl, dlq.Topic(dlqTopic))
	if err != nil {
		return nil, err
	}
	w, err := worker.New(worker.Brokers(c.seeds...), worker.Group(group),
		worker.Handle(topic, h, park),
		worker.KeyLimit(topic, worker.Keys{Key: worker.HeaderKey(limitsHostHeader), Concurrency: limitsPerHost}),
		worker.Concurrency(limitsConcurrency), worker.RetryBackoff(func(int32) time.Duration { return limitsRetryDelay }),
		worker.ShutdownTimeout(5*time.Second), worker.Observers(run), worker.Logger(slog.New(&run.logs)))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	stop = func() error { cancel(); return <-ran }
	if err := c.waitShareMembers(ctx, group, 1); err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// limitTopic creates the scenario's topic and its DLQ topic, and a share
// group.
func limitTopic(ctx context.Context, c *cluster, what string) (topic, dlqTopic, group string, err error) {
	if topic, err = c.topic(ctx, what, limitsPartitions); err != nil {
		return "", "", "", err
	}
	if dlqTopic, err = c.topic(ctx, what+"-dlq", 1); err != nil {
		return "", "", "", err
	}
	group, err = c.shareGroup(ctx, what)
	return topic, dlqTopic, group, err
}

// pacedJob is one job of a schedule: its destination, produced at its
// offset from the start.
type pacedJob struct {
	at   time.Duration
	dest int
}

// produceSchedule produces the jobs at their times, each with its
// destination's host header, and waits for the broker's acks.
func produceSchedule(ctx context.Context, c *cluster, topic string, dests []*dest, jobs []pacedJob) error {
	var mu sync.Mutex
	var perr error
	began := time.Now()
	for i, j := range jobs {
		if err := sleepCtx(ctx, time.Until(began.Add(j.at))); err != nil {
			return err
		}
		rec := &kgo.Record{Topic: topic, Value: limitJob(i, j.dest),
			Headers: []kgo.RecordHeader{{Key: limitsHostHeader, Value: []byte(dests[j.dest].name)}}}
		c.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = errors.Join(perr, err)
				mu.Unlock()
			}
		})
	}
	if err := c.cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return perr
}

// every returns the jobs of dest at rate a second from start for d.
func every(dest int, rate int, start, d time.Duration) []pacedJob {
	n := int(d.Seconds() * float64(rate))
	out := make([]pacedJob, n)
	for i := range out {
		out[i] = pacedJob{at: start + time.Duration(float64(i)/float64(rate)*float64(time.Second)), dest: dest}
	}
	return out
}

func merge(lists ...[]pacedJob) []pacedJob {
	var out []pacedJob
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortStableFunc(out, func(a, b pacedJob) int { return int(a.at - b.at) })
	return out
}

// runLimitJobs runs jobs on a fresh topic and worker and returns their
// traces.
func runLimitJobs(ctx context.Context, c *cluster, what string, dests []*dest, jobs []pacedJob, fiveXXDown bool,
	during func(began time.Time), timeout time.Duration) (*limitRun, error) {
	run := newLimitRun(len(jobs))
	topic, dlqTopic, group, err := limitTopic(ctx, c, what)
	if err != nil {
		return run, err
	}
	client := &http.Client{Timeout: limitsHTTPTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: limitsConcurrency}}
	defer client.CloseIdleConnections()
	stop, err := limitWorker(ctx, c, topic, dlqTopic, group, run, deliverFunc(run, dests, client, fiveXXDown))
	if err != nil {
		return run, err
	}
	began := time.Now()
	var wg sync.WaitGroup
	if during != nil {
		wg.Go(func() { during(began) })
	}
	err = produceSchedule(ctx, c, topic, dests, jobs)
	if err == nil {
		err = run.wait(ctx, timeout)
	}
	wg.Wait()
	return run, errors.Join(err, stop())
}

// isolationResult holds the isolation scenario's figures.
type isolationResult struct {
	HealthyJobs             int
	AloneP99, WithP99       time.Duration
	LostDeliveries          int   // runs on a delivery past the one the job's earlier runs explain
	Unexplained             int64 // records acquired beyond one per job and one per release
	Expired                 int64
	BrokenJobs, BrokenExact int // broken jobs, and those parked after exactly the delivery limit's runs
	BrokenRuns              []int
	SlowParked, SlowJobs    int
}

// Isolation: 6 healthy hosts at 10 jobs/s each, 2 slow and 2 broken at 1
// job/s each, for isolationFor.
const (
	isolationHealthy = 6
	isolationSlow    = 2
	isolationBroken  = 2
	isolationFor     = 20 * time.Second
)

func runIsolation(ctx context.Context, c *cluster, progress func(string)) (isolationResult, error) {
	var res isolationResult
	var dests []*dest
	for i := range isolationHealthy {
		dests = append(dests, startDest(fmt.Sprintf("healthy-%d.example", i), destHealthy))
	}
	for i := range isolationSlow {
		dests = append(dests, startDest(fmt.Sprintf("slow-%d.example", i), destSlow))
	}
	for i := range isolationBroken {
		dests = append(dests, startDest(fmt.Sprintf("broken-%d.example", i), destBroken))
	}
	defer func() {
		for _, d := range dests {
			d.srv.Close()
		}
	}()
	var healthy, others [][]pacedJob
	for i := range isolationHealthy {
		healthy = append(healthy, every(i, 10, 0, isolationFor))
	}
	for i := isolationHealthy; i < len(dests); i++ {
		others = append(others, every(i, 1, 0, isolationFor))
	}
	p99 := func(run *limitRun) (time.Duration, int) {
		var lat []time.Duration
		for _, t := range run.snapshot() {
			if dests[t.dest].kind == destHealthy && !t.done.IsZero() {
				lat = append(lat, t.done.Sub(t.produced))
			}
		}
		if len(lat) == 0 {
			return 0, 0
		}
		slices.Sort(lat)
		return lat[min(len(lat)-1, len(lat)*99/100)], len(lat)
	}

	progress("isolation: the healthy jobs alone")
	alone, err := runLimitJobs(ctx, c, "isolation-alone", dests, merge(healthy...), false, nil, 60*time.Second)
	if err != nil {
		return res, fmt.Errorf("alone: %w", err)
	}
	res.AloneP99, res.HealthyJobs = p99(alone)

	progress("isolation: healthy, slow and broken interleaved")
	with, err := runLimitJobs(ctx, c, "isolation-mixed", dests, merge(append(healthy, others...)...), false, nil, 120*time.Second)
	if err != nil {
		return res, fmt.Errorf("mixed: %w", err)
	}
	res.WithP99, _ = p99(with)
	res.Expired = with.expired.Load()
	res.Unexplained = with.unexplained()
	for _, t := range with.snapshot() {
		res.LostDeliveries += t.lostRuns
		switch dests[t.dest].kind {
		case destBroken:
			res.BrokenJobs++
			res.BrokenRuns = append(res.BrokenRuns, t.runs)
			if t.outcome == worker.OutcomeParked && t.runs == int(t.limit) && t.lostRuns == 0 {
				res.BrokenExact++
			}
		case destSlow:
			res.SlowJobs++
			if t.outcome == worker.OutcomeParked {
				res.SlowParked++
			}
		}
	}
	return res, nil
}

// breakerResult holds the breaker scenario's figures.
type breakerResult struct {
	DownJobs, DownDone  int
	DownDeliveriesSpent int     // deliveries past the first of the down destination's jobs' runs
	Unexplained         int64   // records acquired beyond one per job and one per release
	PeakWaiting         int64   // the most jobs waiting for their keys at once
	Before, During      float64 // the other four's jobs done a second before and while it was down
	Warn, Info          int
	OthersLate          int
}

// Breaker: five hosts at one of breakerRates jobs/s each for
// breakerBefore + breakerDown + breakerAfter; the first is down (503) for
// breakerDown. At 20 jobs/s the down host's 1,200 jobs stay under the
// worker's bound on waiting jobs (250 per partition assigned: 1,500 on
// the scenario's 6 partitions).
var breakerRates = []int{20, 4}

const (
	breakerHosts  = 5
	breakerBefore = 10 * time.Second
	breakerDown   = 60 * time.Second
	breakerAfter  = 10 * time.Second
)

func runBreaker(ctx context.Context, c *cluster, rate int, progress func(string)) (breakerResult, error) {
	var res breakerResult
	var dests []*dest
	for i := range breakerHosts {
		dests = append(dests, startDest(fmt.Sprintf("shop-%d.example", i), destFlaky))
	}
	defer func() {
		for _, d := range dests {
			d.srv.Close()
		}
	}()
	total := breakerBefore + breakerDown + breakerAfter
	var lists [][]pacedJob
	for i := range dests {
		lists = append(lists, every(i, rate, 0, total))
	}
	var downAt, backAt atomic.Int64
	during := func(began time.Time) {
		if sleepCtx(ctx, time.Until(began.Add(breakerBefore))) != nil {
			return
		}
		dests[0].down.Store(true)
		downAt.Store(time.Now().UnixNano())
		if sleepCtx(ctx, breakerDown) != nil {
			return
		}
		dests[0].down.Store(false)
		backAt.Store(time.Now().UnixNano())
	}
	progress(fmt.Sprintf("breaker: %d hosts at %d jobs/s, one down for %v", breakerHosts, rate, breakerDown))
	run, err := runLimitJobs(ctx, c, "breaker", dests, merge(lists...), true, during, total+90*time.Second)
	down, back := time.Unix(0, downAt.Load()), time.Unix(0, backAt.Load())
	var before, during2 int
	for _, t := range run.snapshot() {
		if t.dest == 0 {
			res.DownJobs++
			if !t.done.IsZero() {
				res.DownDone++
			}
			res.DownDeliveriesSpent += int(max(t.maxCount, 1)) - 1
			continue
		}
		switch {
		case t.done.IsZero():
			res.OthersLate++
		case t.done.Before(down) && t.done.After(down.Add(-breakerBefore/2)):
			before++
		case t.done.After(down) && t.done.Before(back):
			during2++
		}
	}
	res.Before = float64(before) / (breakerBefore / 2).Seconds()
	res.During = float64(during2) / back.Sub(down).Seconds()
	res.Unexplained = run.unexplained()
	res.PeakWaiting = run.peakWaiting.Load()
	res.Warn = run.logs.count("a key's destination is down")
	res.Info = run.logs.count("a key's destination is back")
	return res, err
}

// isolationRows runs the isolation scenario and adds its rows.
func isolationRows(ctx context.Context, c *cluster, add func(scenario, variant, metric string, v float64, unit, note string), progress func(string)) error {
	r, err := runIsolation(ctx, c, progress)
	if err != nil {
		return fmt.Errorf("isolation: %w", err)
	}
	v := fmt.Sprintf("concurrency=%d, %d per host; %d healthy, %d slow, %d broken hosts", limitsConcurrency, limitsPerHost,
		isolationHealthy, isolationSlow, isolationBroken)
	add("isolation", v, "healthy_p99_alone", r.AloneP99.Seconds()*1000, "ms", fmt.Sprintf("%d healthy jobs, produce to done", r.HealthyJobs))
	add("isolation", v, "healthy_p99_with_others", r.WithP99.Seconds()*1000, "ms", "")
	if r.AloneP99 > 0 {
		add("isolation", v, "healthy_p99_ratio", r.WithP99.Seconds()/r.AloneP99.Seconds(), "x", "with the others / alone; goal <= 1.5")
	}
	add("isolation", v, "deliveries_without_a_run", float64(max(int64(r.LostDeliveries), r.Unexplained)), "count",
		fmt.Sprintf("records acquired beyond one per job and per release %d; runs past their delivery %d; lock-expired releases %d; goal 0",
			r.Unexplained, r.LostDeliveries, r.Expired))
	add("isolation", v, "broken_parked_after_the_limit", float64(r.BrokenExact), "jobs",
		fmt.Sprintf("of %d broken jobs; runs %v", r.BrokenJobs, runsSummary(r.BrokenRuns)))
	add("isolation", v, "slow_parked", float64(r.SlowParked), "jobs", fmt.Sprintf("of %d slow jobs", r.SlowJobs))
	return nil
}

// runsSummary counts jobs by their runs: "5×40".
func runsSummary(runs []int) string {
	n := map[int]int{}
	for _, r := range runs {
		n[r]++
	}
	keys := make([]int, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d runs: %d jobs", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// breakerRows runs the breaker scenario at each of breakerRates and adds
// its rows.
func breakerRows(ctx context.Context, c *cluster, add func(scenario, variant, metric string, v float64, unit, note string), progress func(string)) error {
	var errs []error
	for _, rate := range breakerRates {
		r, err := runBreaker(ctx, c, rate, progress)
		v := fmt.Sprintf("%d hosts × %d jobs/s, one down %v; concurrency=%d, %d per host", breakerHosts, rate, breakerDown,
			limitsConcurrency, limitsPerHost)
		add("breaker", v, "down_host_deliveries_spent", float64(r.DownDeliveriesSpent), "count",
			fmt.Sprintf("%d of its %d jobs done; goal 0", r.DownDone, r.DownJobs))
		add("breaker", v, "deliveries_without_a_run", float64(r.Unexplained), "count", "records acquired beyond one per job and per release")
		if r.Before > 0 {
			add("breaker", v, "others_rate_while_down", r.During/r.Before, "x",
				fmt.Sprintf("%.1f jobs/s while down / %.1f before; goal >= 0.95; %d of theirs not done", r.During, r.Before, r.OthersLate))
		}
		add("breaker", v, "peak_waiting", float64(r.PeakWaiting), "jobs",
			"MemberStats.Waiting; past the most of 250 per partition assigned, 16×Concurrency and 64, waiting jobs count against the fetch credit")
		add("breaker", v, "warn_lines", float64(r.Warn), "count", "goal 1")
		add("breaker", v, "info_lines", float64(r.Info), "count", "goal 1")
		if err != nil {
			errs = append(errs, fmt.Errorf("breaker at %d jobs/s: %w", rate, err))
		}
	}
	return errors.Join(errs...)
}
