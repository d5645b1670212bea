package shareqtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/dlq"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// stopTimeout bounds how long Run waits for the worker to stop.
const stopTimeout = 30 * time.Second

// Outcome is how a job ended. The zero value, Pending, means it has not
// ended (yet).
type Outcome int

// The outcomes of a job; see the package documentation.
const (
	// Pending: no final outcome; the job was released and will be
	// delivered again, or was never delivered.
	Pending Outcome = iota
	// Accepted: the handler succeeded and the record was ACCEPTed.
	Accepted
	// Rejected: the handler failed permanently and the record was
	// REJECTed.
	Rejected
	// Parked: the dlq middleware ([DLQ]) parked the job in the
	// dead-letter topic and the record was ACCEPTed.
	Parked
	// Archived: the record was RELEASEd on its last delivery, so the
	// broker archived it.
	Archived
	// Cancelled: the job was cancelled after it was produced
	// (pgoutbox.CancelTx with pgoutbox.ClaimKey), so the idempotency
	// middleware did not run its handler, and the record was ACCEPTed
	// (worker.OutcomeCancelled).
	Cancelled
)

func (o Outcome) String() string {
	switch o {
	case Pending:
		return "pending"
	case Accepted:
		return "accepted"
	case Rejected:
		return "rejected"
	case Parked:
		return "parked"
	case Archived:
		return "archived"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Delivery is one delivery of a record to the worker and how the worker
// acknowledged it.
type Delivery struct {
	// Count is the record's delivery count: 1 on the first delivery.
	Count int32
	// Ack is the acknowledgement the worker sent.
	Ack worker.Ack
	// Outcome is how the worker reported the delivery (worker.Result's
	// Outcome): succeeded, parked, retried, discarded, interrupted or
	// cancelled.
	Outcome worker.Outcome
	// Err is the handler's error (for a parked delivery, the failure it
	// was parked for), or why the worker acknowledged the
	// record without running the handler (see [worker.Result]).
	Err error
	// Ran reports whether the handler ran.
	Ran bool
	// Duration is how long the handler ran.
	Duration time.Duration
	// Parked reports whether the dlq middleware parked the job on this
	// delivery (Outcome is worker.OutcomeParked).
	Parked bool
}

// JobResult is what happened to one job (one record) during a Run.
type JobResult struct {
	// ID is the job's ID ([handler.Job.ID]).
	ID string
	// Topic, Partition and Offset locate the record.
	Topic     string
	Partition int32
	Offset    int64
	// Key, Value and Headers are the record's.
	Key     []byte
	Value   []byte
	Headers []handler.Header
	// Outcome is the job's final outcome, Pending if it has none.
	Outcome Outcome
	// Reason is the reason of the failure that ended the job:
	// [handler.ReasonOf] of the error for Rejected and Archived, the
	// reason recorded by the dlq middleware for Parked; "" for Accepted
	// and for an error without a reason.
	Reason string
	// Err is the handler's error on the last delivery (for Parked, the
	// failure the job was parked for); nil when it succeeded.
	Err error
	// Deliveries lists every delivery, in order.
	Deliveries []Delivery
}

// Releases returns how many times the job was released: delivered again
// after a failure, or, on its last delivery, archived.
func (j JobResult) Releases() int {
	n := 0
	for _, d := range j.Deliveries {
		if d.Ack == worker.AckRelease {
			n++
		}
	}
	return n
}

func (j JobResult) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s (%s/%d/%d): %s after %d deliveries", j.ID, j.Topic, j.Partition, j.Offset, j.Outcome, len(j.Deliveries))
	for _, d := range j.Deliveries {
		fmt.Fprintf(&b, "\n\tdelivery %d: %s (%s)", d.Count, d.Ack, d.Outcome)
		if d.Err != nil {
			fmt.Fprintf(&b, ": %v", d.Err)
		}
	}
	return b.String()
}

// Counts is how many jobs of a Run ended each way, for
// [Result.RequireCounts].
type Counts struct {
	Accepted, Rejected, Parked, Archived, Pending, Cancelled int
}

// Result is what a [Queue.Run] saw: the jobs it waited for and every
// other record delivered while it ran. It is read-only and safe for
// concurrent use.
type Result struct {
	jobs []*JobResult // jobs produced with Produce first, in produce order
	byID map[string]*JobResult
}

// Jobs returns the jobs the Run waited for (produced with Produce and not
// finished by an earlier Run), in the order they were produced, then any
// other records delivered during the Run, in the order they were first
// delivered.
func (r *Result) Jobs() []JobResult {
	out := make([]JobResult, len(r.jobs))
	for i, j := range r.jobs {
		out[i] = *j
	}
	return out
}

// Job returns the job with the given ID and whether there is one. If two
// records carry the same ID, it returns the first.
func (r *Result) Job(id string) (JobResult, bool) {
	j, ok := r.byID[id]
	if !ok {
		return JobResult{}, false
	}
	return *j, true
}

// Count returns how many jobs ended with outcome o.
func (r *Result) Count(o Outcome) int {
	n := 0
	for _, j := range r.jobs {
		if j.Outcome == o {
			n++
		}
	}
	return n
}

// IDs returns the IDs of the jobs that ended with outcome o, in the order
// of [Result.Jobs].
func (r *Result) IDs(o Outcome) []string {
	var ids []string
	for _, j := range r.jobs {
		if j.Outcome == o {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

// RequireCounts fails the test unless exactly want jobs ended each way.
func (r *Result) RequireCounts(t testing.TB, want Counts) {
	t.Helper()
	got := Counts{
		Accepted: r.Count(Accepted), Rejected: r.Count(Rejected), Parked: r.Count(Parked),
		Archived: r.Count(Archived), Pending: r.Count(Pending), Cancelled: r.Count(Cancelled),
	}
	if got != want {
		t.Fatalf("shareqtest: outcomes %+v, want %+v\n%s", got, want, r.describe())
	}
}

// RequireAccepted fails the test unless every job named was accepted.
func (r *Result) RequireAccepted(t testing.TB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r.require(t, id, Accepted, "")
	}
}

// RequireRejected fails the test unless the job was rejected with reason
// (any reason when reason is "").
func (r *Result) RequireRejected(t testing.TB, id, reason string) {
	t.Helper()
	r.require(t, id, Rejected, reason)
}

// RequireParked fails the test unless the job was parked in the
// dead-letter topic with reason (any reason when reason is ""). Jobs are
// parked only with the [DLQ] option.
func (r *Result) RequireParked(t testing.TB, id, reason string) {
	t.Helper()
	r.require(t, id, Parked, reason)
}

// RequireCancelled fails the test unless every job named was cancelled:
// ACCEPTed without running, its claim holding a cancel.
func (r *Result) RequireCancelled(t testing.TB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r.require(t, id, Cancelled, "")
	}
}

// RequireArchived fails the test unless the job was released on its last
// delivery, so that the broker archived it.
func (r *Result) RequireArchived(t testing.TB, id string) {
	t.Helper()
	r.require(t, id, Archived, "")
}

// RequireReleased fails the test unless the job was released exactly
// times times (a release on the last delivery, which archives the job,
// counts).
func (r *Result) RequireReleased(t testing.TB, id string, times int) {
	t.Helper()
	j := r.mustJob(t, id)
	if n := j.Releases(); n != times {
		t.Fatalf("shareqtest: job %s was released %d times, want %d\n%s", id, n, times, j.describe())
	}
}

func (r *Result) require(t testing.TB, id string, want Outcome, reason string) {
	t.Helper()
	j := r.mustJob(t, id)
	if j.Outcome != want {
		t.Fatalf("shareqtest: job %s is %s, want %s\n%s", id, j.Outcome, want, j.describe())
	}
	if reason != "" && j.Reason != reason {
		t.Fatalf("shareqtest: job %s is %s with reason %q, want reason %q\n%s", id, j.Outcome, j.Reason, reason, j.describe())
	}
}

func (r *Result) mustJob(t testing.TB, id string) *JobResult {
	t.Helper()
	j, ok := r.byID[id]
	if !ok {
		ids := make([]string, len(r.jobs))
		for i, j := range r.jobs {
			ids[i] = j.ID
		}
		t.Fatalf("shareqtest: no job %q was delivered in this Run; jobs: %q", id, ids)
	}
	return j
}

func (r *Result) describe() string {
	var b strings.Builder
	for _, j := range r.jobs {
		b.WriteString(j.describe())
		b.WriteByte('\n')
	}
	return b.String()
}

// Run runs a worker with h for the jobs topic until every job produced
// with Produce or ProduceJSON (and not finished by an earlier Run) has a
// final outcome, stops it, and returns what happened. It fails the test if
// the worker does not start, if a job has no final outcome within the
// run timeout ([RunTimeout]), or if there is no job to wait for.
//
// The worker joins the Queue's share group with
// share.auto.offset.reset=earliest, so it sees jobs produced before it
// started, and runs with the worker's defaults except a short shutdown
// timeout, a retry backoff of [RetryBackoffDefault] (10 ms), a fetch
// wait (worker.FetchMaxWait) of 20 ms instead of 100 ms, since a release
// waits for the fetch in flight, and a silent logger. opts are added
// after those and may change them (worker.Concurrency, worker.Use for
// middleware, worker.Logger to see its logs, worker.RetryBackoff); Run's own observer comes last, after any
// worker.Observers in opts, and every observer hears every job.
func (q *Queue) Run(t testing.TB, h handler.Handler, opts ...worker.Option) *Result {
	t.Helper()
	q.runMu.Lock()
	defer q.runMu.Unlock()
	if len(q.pending()) == 0 {
		t.Fatalf("shareqtest: Run: no jobs to wait for; produce them with Produce or ProduceJSON first")
	}

	rec := &recorder{q: q, limit: int32(q.cfg.deliveryLimit), jobs: map[location]*JobResult{}, changed: make(chan struct{}, 1)}
	silent := slog.New(slog.NewTextHandler(io.Discard, nil))
	base := []worker.Option{
		worker.Brokers(q.Brokers()...),
		worker.Group(q.cfg.group),
		worker.AutoOffsetReset("earliest"),
		worker.DeliveryLimit(q.cfg.deliveryLimit),
		worker.ShutdownTimeout(5 * time.Second),
		worker.StartTimeout(10 * time.Second),
		worker.RetryBackoff(func(int32) time.Duration { return RetryBackoffDefault }),
		worker.FetchMaxWait(20 * time.Millisecond),
		worker.Logger(silent),
	}
	if q.cfg.dlq {
		dopts := append([]dlq.Option{dlq.Logger(silent)}, q.cfg.dlqOpts...)
		park, err := dlq.Middleware(q.client, dopts...)
		if err != nil {
			t.Fatalf("shareqtest: DLQ: %v", err)
		}
		base = append(base, worker.Use(park))
	}
	base = append(base, worker.Handle(q.cfg.topic, h))
	w, err := worker.New(slices.Concat(base, opts, []worker.Option{worker.Observers(rec)})...)
	if err != nil {
		t.Fatalf("shareqtest: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	timeout := time.NewTimer(q.cfg.runTimeout)
	defer timeout.Stop()
	var runErr error
	stopped, timedOut := false, false
	for !stopped && !timedOut && !rec.complete() {
		select {
		case <-rec.changed:
		case runErr = <-done:
			stopped = true
		case <-timeout.C:
			timedOut = true
		}
	}
	cancel()
	if !stopped {
		select {
		case runErr = <-done:
		case <-time.After(stopTimeout):
			t.Fatalf("shareqtest: the worker did not stop within %v: a handler ignores its cancelled context", stopTimeout)
		}
	}
	res := rec.result()
	if runErr != nil {
		t.Fatalf("shareqtest: worker: %v", runErr)
	}
	if stopped && !rec.complete() {
		t.Fatalf("shareqtest: the worker stopped before every job had a final outcome\n%s", res.describe())
	}
	if timedOut {
		t.Fatalf("shareqtest: after %v, %d of the jobs have no final outcome (raise RunTimeout if the handler is slow)\n%s",
			q.cfg.runTimeout, res.Count(Pending), res.describe())
	}
	q.mu.Lock()
	for _, j := range res.jobs {
		if j.Outcome != Pending {
			q.done[location{j.Topic, j.Partition, j.Offset}] = true
		}
	}
	q.mu.Unlock()
	return res
}

// recorder is the worker.Observer of a Run.
type recorder struct {
	q     *Queue
	limit int32

	mu      sync.Mutex
	jobs    map[location]*JobResult
	order   []*JobResult // in order of first delivery
	changed chan struct{}
}

var _ worker.Observer = (*recorder)(nil)

// JobStarted implements worker.Observer.
func (r *recorder) JobStarted(*handler.Job) {}

// LockRenewed implements worker.Observer.
func (r *recorder) LockRenewed(*handler.Job, error) {}

// AckFailed implements worker.Observer.
func (r *recorder) AckFailed(string, int32, error) {}

// JobFinished implements worker.Observer: it records the delivery and the
// job's outcome.
func (r *recorder) JobFinished(job *handler.Job, res worker.Result) {
	loc := location{job.Topic, job.Partition, job.Offset}
	r.mu.Lock()
	j := r.jobs[loc]
	if j == nil {
		j = &JobResult{
			ID: job.ID(), Topic: job.Topic, Partition: job.Partition, Offset: job.Offset,
			Key: job.Key, Value: job.Value, Headers: job.Headers,
		}
		r.jobs[loc] = j
		r.order = append(r.order, j)
	}
	d := Delivery{Count: job.DeliveryCount, Ack: res.Ack, Outcome: res.Outcome, Err: res.Err, Ran: res.Ran, Duration: res.Duration,
		Parked: res.Outcome == worker.OutcomeParked}
	j.Deliveries = append(j.Deliveries, d)
	j.Err = res.Err
	j.Reason = handler.ReasonOf(res.Err)
	switch {
	case res.Outcome == worker.OutcomeParked:
		// The worker's own report: the dlq middleware returned a
		// *handler.ParkedError; no OnPark hook of ours is needed.
		j.Outcome, j.Reason = Parked, res.Parked.Reason
	case res.Outcome == worker.OutcomeCancelled:
		j.Outcome, j.Reason = Cancelled, ""
	case res.Ack == worker.AckAccept:
		j.Outcome, j.Reason = Accepted, ""
	case res.Ack == worker.AckReject:
		j.Outcome = Rejected
	case res.Ack == worker.AckRelease:
		j.Outcome = Pending
		if job.DeliveryCount >= r.limit {
			j.Outcome = Archived
		}
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// complete reports whether every pending produced job has a final
// outcome.
func (r *recorder) complete() bool {
	pending := r.q.pending()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range pending {
		if j := r.jobs[p.loc]; j == nil || j.Outcome == Pending {
			return false
		}
	}
	return true
}

// result returns a copy of what the recorder saw, produced jobs first.
func (r *recorder) result() *Result {
	pending := r.q.pending()
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{byID: map[string]*JobResult{}}
	seen := map[location]bool{}
	add := func(j *JobResult) {
		c := *j
		c.Deliveries = slices.Clone(j.Deliveries)
		res.jobs = append(res.jobs, &c)
		if _, dup := res.byID[c.ID]; !dup {
			res.byID[c.ID] = &c
		}
		seen[location{c.Topic, c.Partition, c.Offset}] = true
	}
	for _, p := range pending {
		if j := r.jobs[p.loc]; j != nil {
			add(j)
		} else { // never delivered
			add(&JobResult{ID: p.id, Topic: p.loc.topic, Partition: p.loc.partition, Offset: p.loc.offset,
				Key: p.key, Value: p.value, Headers: p.headers})
		}
	}
	for _, j := range r.order {
		if !seen[location{j.Topic, j.Partition, j.Offset}] {
			add(j)
		}
	}
	return res
}
