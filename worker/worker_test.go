package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

func TestOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	b.produce(t, "ok", "release", "reject", "panic")

	var mu sync.Mutex
	runs := map[string][]int32{}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		key := string(job.Key)
		mu.Lock()
		runs[key] = append(runs[key], job.DeliveryCount)
		mu.Unlock()
		switch key {
		case "release":
			if job.DeliveryCount == 1 {
				return errRetry
			}
		case "reject":
			return handler.Permanent(errors.New("bad job"))
		case "panic":
			panic("boom")
		}
		return nil
	})
	second := new(shareqtest.Observer) // observers add up
	b.start(t, h, worker.Concurrency(4), worker.Observers(second))

	b.obs.WaitFor(t, 30*time.Second, "all outcomes", func(fs []finished) bool {
		return count(fs, "ok", worker.AckAccept) == 1 && count(fs, "release", worker.AckRelease) == 1 &&
			count(fs, "release", worker.AckAccept) == 1 && count(fs, "reject", worker.AckReject) == 1 &&
			count(fs, "panic", worker.AckReject) == 1
	})
	// Rejected records are never delivered again; give the broker time to
	// redeliver anything it would.
	time.Sleep(b.c.LockDuration + time.Second)

	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"ok": "[1]", "release": "[1 2]", "reject": "[1]", "panic": "[1]"}
	for k, w := range want {
		if got := fmt.Sprint(runs[k]); got != w {
			t.Errorf("%s ran with delivery counts %s, want %s", k, got, w)
		}
	}
	if first, other := shareqtest.Summary(b.obs.Events()), shareqtest.Summary(second.Events()); first != other {
		t.Errorf("second observer saw %s, first %s", other, first)
	}
	for _, f := range b.obs.Events() {
		if want := f.Result.Ack != worker.AckRelease; f.Result.Final != want {
			t.Errorf("%s %v on delivery %d: Final = %v, want %v", f.Key, f.Result.Ack, f.Count, f.Result.Final, want)
		}
		want := map[worker.Ack]worker.Outcome{worker.AckAccept: worker.OutcomeSucceeded, worker.AckRelease: worker.OutcomeRetried, worker.AckReject: worker.OutcomeDiscarded}[f.Result.Ack]
		if f.Result.Outcome != want {
			t.Errorf("%s %v on delivery %d: outcome %v, want %v", f.Key, f.Result.Ack, f.Count, f.Result.Outcome, want)
		}
		if f.Key == "panic" {
			var pe *handler.PanicError
			if !errors.As(f.Result.Err, &pe) || pe.Value != "boom" || !strings.Contains(string(pe.Stack), "worker_test") {
				t.Errorf("panic outcome error = %v, want a PanicError with value and stack", f.Result.Err)
			}
		}
	}
}

// One slow job must not hold back the jobs behind it on its partition.
func TestHeadOfLine(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	keys := []string{"slow"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("fast-%03d", i))
	}
	b.produce(t, keys...)
	slowTook := 3 * time.Second
	var slowDone atomic.Int64
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Key) == "slow" {
			time.Sleep(slowTook)
			slowDone.Store(time.Now().UnixNano())
			return nil
		}
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	b.start(t, h, worker.Concurrency(8))
	fs := b.obs.WaitFor(t, 60*time.Second, "all 201 jobs", func(fs []finished) bool {
		n := 0
		for _, f := range fs {
			if f.Result.Ack == worker.AckAccept {
				n++
			}
		}
		return n == 201
	})
	slowAt := time.Unix(0, slowDone.Load())
	var lastFast time.Time
	for _, f := range fs {
		if strings.HasPrefix(f.Key, "fast-") && f.At.After(lastFast) {
			lastFast = f.At
		}
		if f.Count != 1 {
			t.Errorf("%s delivered %d times", f.Key, f.Count)
		}
	}
	if !lastFast.Before(slowAt) {
		t.Fatalf("last fast job acked %v after the slow job finished", lastFast.Sub(slowAt))
	}
	t.Logf("%s: 200 fast jobs done %v before the slow one", b.c.Kind, slowAt.Sub(lastFast).Round(time.Millisecond))
}

// A job that runs three lock durations keeps its lock by renewing it: it
// completes once and no other member gets it.
func TestRenewLongJob(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "long")
	var runs atomic.Int32
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		runs.Add(1)
		select {
		case <-time.After(3 * b.c.LockDuration):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	b.start(t, h)
	// A second member of the group would take the record if its lock ran
	// out.
	other := b.start(t, h)
	fs := b.obs.WaitFor(t, 6*b.c.LockDuration+30*time.Second, "the long job", func(fs []finished) bool {
		return count(fs, "long", worker.AckAccept) == 1
	})
	time.Sleep(b.c.LockDuration + b.c.LockSweep + time.Second)
	if err := other(); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("long job ran %d times; finished: %s", n, shareqtest.Summary(b.obs.Events()))
	}
	if fs[0].Result.LockLeft <= 0 {
		t.Errorf("lock left at accept = %v, want positive", fs[0].Result.LockLeft)
	}
	if renewed, failed := b.obs.Renewals(); renewed < 3 || failed != 0 {
		t.Fatalf("renewals %d (failed %d), want at least 3 and none failed", renewed, failed)
	}
}

// A member that dies holding a record without acknowledging it: the record
// goes to another member once its lock runs out.
func TestCrashedMemberRecordRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "job")
	held, kill := kafkatest.StartCrashMember(t, b.c, b.group, b.topic, 1)
	key := held[0].Key
	kill()
	var counts []int32
	var mu sync.Mutex
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		counts = append(counts, job.DeliveryCount)
		mu.Unlock()
		return nil
	})
	b.start(t, h)
	b.obs.WaitFor(t, b.c.LockDuration+30*time.Second, "the crashed member's job", func(fs []finished) bool {
		return count(fs, key, worker.AckAccept) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(counts) != 1 || counts[0] < 2 {
		t.Fatalf("job ran with delivery counts %v, want once with count >= 2", counts)
	}
}

// Stopping with jobs in flight: jobs that finish within the shutdown
// timeout are accepted, the rest cancelled and released, and a new worker
// gets exactly the released ones.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.produce(t, "quick", "medium-1", "medium-2", "stuck-1", "stuck-2")
	var started sync.WaitGroup
	started.Add(4)
	var mu sync.Mutex
	runs := map[string][]int32{}
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		key := string(job.Key)
		mu.Lock()
		runs[key] = append(runs[key], job.DeliveryCount)
		mu.Unlock()
		if job.DeliveryCount > 1 || key == "quick" {
			return nil
		}
		started.Done()
		d := 500 * time.Millisecond
		if strings.HasPrefix(key, "stuck") {
			d = time.Hour
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	stop := b.start(t, h, worker.Concurrency(5), worker.ShutdownTimeout(2*time.Second))
	started.Wait()
	b.obs.WaitFor(t, 30*time.Second, "quick job", func(fs []finished) bool { return count(fs, "quick", worker.AckAccept) == 1 })
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v on graceful stop", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("stop took %v with a 2s shutdown timeout", took)
	}
	fs := b.obs.Events()
	for _, k := range []string{"medium-1", "medium-2"} {
		if count(fs, k, worker.AckAccept) != 1 {
			t.Errorf("%s not accepted at stop: %s", k, shareqtest.Summary(fs))
		}
	}
	for _, k := range []string{"stuck-1", "stuck-2"} {
		if count(fs, k, worker.AckRelease) != 1 || count(fs, k, worker.AckAccept) != 0 {
			t.Errorf("%s not released at stop: %s", k, shareqtest.Summary(fs))
		}
	}
	for _, f := range fs {
		if strings.HasPrefix(f.Key, "stuck") && !errors.Is(f.Result.Err, worker.ErrShutdown) {
			t.Errorf("%s released with %v, want ErrShutdown", f.Key, f.Result.Err)
		}
	}

	// A new worker gets the released jobs and only those.
	b2 := *b
	b2.obs = new(shareqtest.Observer)
	b2.start(t, h)
	b2.obs.WaitFor(t, 30*time.Second, "released jobs", func(fs []finished) bool {
		return count(fs, "stuck-1", worker.AckAccept) == 1 && count(fs, "stuck-2", worker.AckAccept) == 1
	})
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{"quick": "[1]", "medium-1": "[1]", "medium-2": "[1]", "stuck-1": "[1 2]", "stuck-2": "[1 2]"}
	for k, w := range want {
		if got := fmt.Sprint(runs[k]); got != w {
			t.Errorf("%s ran with delivery counts %s, want %s", k, got, w)
		}
	}
}

func TestStartupChecks(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	run := func(opts ...worker.Option) error {
		w, err := worker.New(append([]worker.Option{worker.Group(b.group), worker.Logger(shareqtest.Logger()), worker.StartTimeout(3 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.Run(ctx)
	}
	err := run(worker.Brokers(b.c.Seeds...), worker.Handle("no-such-topic-"+b.topic, nop))
	if !errors.Is(err, worker.ErrTopicMissing) || !strings.Contains(err.Error(), "no-such-topic-") {
		t.Errorf("missing topic: %v", err)
	}
	// A DLQ topic the handlers need: checked, not consumed.
	dlqTopic := b.topic + ".dlq"
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop), worker.RequireTopics(dlqTopic), worker.StartTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	err = w.Check(cctx)
	if !errors.Is(err, worker.ErrTopicMissing) || !strings.Contains(err.Error(), dlqTopic) || !strings.Contains(err.Error(), "RequireTopics") {
		t.Errorf("missing required topic: %v", err)
	}
	b.c.CreateTopic(t, dlqTopic, 1)
	if err := w.Check(cctx); err != nil {
		t.Errorf("required topic created: %v", err)
	}
	if got := w.Topics(); len(got) != 1 || got[0] != b.topic {
		t.Errorf("Topics() = %v, want only the handled topic %s", got, b.topic)
	}
	err = run(worker.Brokers("127.0.0.1:1"), worker.Handle(b.topic, nop))
	if !errors.Is(err, worker.ErrBrokersUnreachable) {
		t.Errorf("unreachable brokers: %v", err)
	}
	// A group name a consumer group already uses.
	classic := kafkatest.Name(t, "classic")
	cg := b.c.Client(t, kgo.ConsumerGroup(classic), kgo.ConsumeTopics(b.topic))
	b.produce(t, "x")
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	for cg.PollFetches(pctx).NumRecords() == 0 && pctx.Err() == nil {
	}
	if err := cg.CommitUncommittedOffsets(pctx); err != nil {
		t.Fatalf("consumer group commit: %v", err)
	}
	pcancel()
	err = run(worker.Brokers(b.c.Seeds...), worker.Handle(b.topic, nop), worker.Group(classic))
	if !errors.Is(err, worker.ErrGroupNotShare) || !strings.Contains(err.Error(), classic) {
		t.Errorf("consumer group name: %v", err)
	}

	w, _ = worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err == nil {
		// A cancelled context may fail the checks or stop at once; either
		// way a second Run is refused.
		if err := w.Run(context.Background()); !errors.Is(err, worker.ErrAlreadyRan) {
			t.Errorf("second Run: %v", err)
		}
	}
}

// A job that fails with a retryable error is held for its backoff before
// it is released, so its deliveries are spaced; a backoff longer than the
// lock is bridged by renewals, and no other member gets the job meanwhile.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "flaky")
	hold := b.c.LockDuration + b.c.LockDuration/2
	var mu sync.Mutex
	var at []time.Time
	var counts []int32
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		counts = append(counts, job.DeliveryCount)
		if job.DeliveryCount < 3 {
			return handler.Retry("upstream down", errRetry)
		}
		return nil
	})
	backoff := worker.RetryBackoff(func(int32) time.Duration { return hold })
	b.start(t, h, backoff)
	b.start(t, h, backoff) // a second member that would take the job if its lock ran out
	fs := b.obs.WaitFor(t, 4*hold+30*time.Second, "the flaky job accepted", func(fs []finished) bool {
		return count(fs, "flaky", worker.AckAccept) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(counts) != "[1 2 3]" {
		t.Fatalf("delivery counts %v, want [1 2 3]; finished: %s", counts, shareqtest.Summary(fs))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < hold {
			t.Errorf("delivery %d came %v after the previous one, want at least the backoff %v", i+1, gap, hold)
		}
	}
	for _, f := range fs {
		if f.Result.Ack == worker.AckRelease && handler.ReasonOf(f.Result.Err) != "upstream down" {
			t.Errorf("released with %v, want the handler's error", f.Result.Err)
		}
	}
}

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	f := worker.ExponentialBackoff(time.Second, 5*time.Second)
	for _, tc := range []struct {
		delivery int32
		want     time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 5 * time.Second}, {9, 5 * time.Second}} {
		for range 20 {
			got := f(tc.delivery)
			if got < tc.want*8/10 || got > min(tc.want*12/10, 5*time.Second) {
				t.Fatalf("delivery %d: backoff %v, want %v ±20%% and at most 5s", tc.delivery, got, tc.want)
			}
		}
	}
}

// Every job on one partition of four, more jobs than handler slots: the
// worker's one member fetches from every partition it is assigned, so
// empty partitions never hold slots back. (Lanes, each a member with
// partitions of its own, once stalled here.)
func TestEmptyPartitionsDoNotStall(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	cl := b.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, &kgo.Record{Topic: b.topic, Partition: 0, Key: []byte(fmt.Sprintf("job-%02d", i))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	b.start(t, nop, worker.Concurrency(2))
	b.obs.WaitFor(t, 60*time.Second, "all 30 jobs", func(fs []finished) bool {
		n := 0
		for _, f := range fs {
			if f.Result.Ack == worker.AckAccept {
				n++
			}
		}
		return n == 30
	})
}

// DeliveryLimit and AutoOffsetReset are written to the group before the
// worker joins; handlers see the group's limit less SpareDeliveries.
func TestGroupConfigOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.group = b.c.GroupWith(t, nil) // no configs yet
	b.produce(t, "a", "b")
	limits := make(chan int32, 2)
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		limits <- job.DeliveryLimit
		return nil
	})
	// expect checks the Job.DeliveryLimit of the next job handled.
	expect := func(want int32, from, notDelivered string) {
		t.Helper()
		select {
		case got := <-limits:
			if got != want {
				t.Errorf("Job.DeliveryLimit = %d, want %d (%s)", got, want, from)
			}
		case <-time.After(30 * time.Second):
			t.Fatal(notDelivered)
		}
	}
	if !b.c.GroupDeliveryLimitConfig {
		// Kafka 4.2 has no group-level delivery limit: the option fails
		// the start, saying what to do instead.
		w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, h),
			worker.Logger(shareqtest.Logger()), worker.DeliveryLimit(7))
		if err != nil {
			t.Fatal(err)
		}
		err = w.Check(context.Background())
		if err == nil || !strings.Contains(err.Error(), "Apache Kafka 4.3+") || !strings.Contains(err.Error(), groupcfg.BrokerDeliveryCountLimit) {
			t.Fatalf("DeliveryLimit on Kafka %s: Check = %v, want an error naming Kafka 4.3+ and %s", b.c.Version, err, groupcfg.BrokerDeliveryCountLimit)
		}
		// The broker's limit, less the spares.
		b.start(t, h, worker.AutoOffsetReset("earliest"), worker.SpareDeliveries(1))
		for range 2 {
			expect(int32(b.c.DeliveryLimit-1), "SpareDeliveries", "the jobs produced before the group existed were not delivered: AutoOffsetReset not applied")
		}
		return
	}
	b.start(t, h, worker.AutoOffsetReset("earliest"), worker.DeliveryLimit(7), worker.SpareDeliveries(3))
	for range 2 {
		expect(4, "DeliveryLimit less SpareDeliveries", "the jobs produced before the group existed were not delivered: AutoOffsetReset not applied")
	}
	wantGroupConfigs(t, b.c, b.group, map[string]string{groupcfg.DeliveryCountLimit: "7", groupcfg.AutoOffsetReset: "earliest"})

	// Without spares, handlers see the group's limit.
	b2 := setup(t, 1)
	b2.produce(t, "c")
	b2.start(t, h, worker.DeliveryLimit(6))
	expect(6, "DeliveryLimit", "job not delivered")
}

// SpareDeliveries that leave none of the group's limit (read from the
// group or the broker, here the broker's) fail the start, saying what to
// change.
func TestSpareDeliveriesLeaveADelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop),
		worker.Logger(shareqtest.Logger()), worker.SpareDeliveries(b.c.DeliveryLimit))
	if err != nil {
		t.Fatal(err)
	}
	err = w.Check(context.Background())
	want := fmt.Sprintf("SpareDeliveries(%d) leaves none of group %q's %d deliveries", b.c.DeliveryLimit, b.group, b.c.DeliveryLimit)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "worker.DeliveryLimit") {
		t.Fatalf("Check = %v, want an error saying %q and naming worker.DeliveryLimit", err, want)
	}
}

// Every member of a worker connects with a client ID that names the
// process ("shareq-<host>-<pid>"), so shareq status tells workers apart;
// kgo.ClientID in ClientOpts overrides it.
func TestClientIDNamesTheProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	host, _ := os.Hostname()
	want := fmt.Sprintf("shareq-%s-%d", host, os.Getpid())
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	b.start(t, nop)
	b.waitMemberClientID(t, want)

	other := setup(t, 1)
	other.start(t, nop, worker.ClientOpts(kgo.ClientID("thumbnails-7")))
	other.waitMemberClientID(t, "thumbnails-7")
}

// waitMemberClientID waits until the bundle's group has members and every
// one of them connected with client ID id.
func (b *bundle) waitMemberClientID(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seen []string
	for ctx.Err() == nil {
		seen = seen[:0]
		if ds, err := b.c.Admin().DescribeShareGroups(ctx, b.group); err == nil {
			for _, m := range ds[b.group].Members {
				seen = append(seen, m.ClientID)
			}
		}
		if len(seen) > 0 && !slices.ContainsFunc(seen, func(s string) bool { return s != id }) {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the admin API: no event to wait on
	}
	t.Fatalf("group %s members' client IDs = %v, want all %q", b.group, seen, id)
}

// A group whose share.renew.acknowledge.enable is false (Kafka 4.3+)
// cannot renew locks: the worker sets it back to true at start. Brokers
// without the config (kfake, Kafka 4.2) renew anyway, and the worker
// sets nothing.
func TestRenewAckEnableSetAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	if b.c.RenewAckConfig {
		b.c.SetGroupConfig(t, b.group, map[string]string{groupcfg.RenewAckEnable: "false"})
	}
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, nop), worker.Logger(shareqtest.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{groupcfg.RenewAckEnable: "true"}
	if !b.c.RenewAckConfig {
		want = map[string]string{}
	}
	wantGroupConfigs(t, b.c, b.group, want, groupcfg.RenewAckEnable)
}

// Stopped is closed once Run has returned, and Err says why: nil after a
// graceful stop, the failed check's error for a worker that could not
// start. Neither says anything while the worker runs.
func TestStoppedSaysWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.produce(t, "a")
	ran := make(chan struct{}, 1)
	h := handler.Func(func(context.Context, *handler.Job) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	})
	w, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Handle(b.topic, h),
		worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Stopped():
		t.Fatal("Stopped closed before Run")
	default:
	}
	stop := kafkatest.Run(t, w.Run)
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("no job ran within 30s")
	}
	select {
	case <-w.Stopped():
		t.Fatalf("Stopped closed while the worker runs (Err %v)", w.Err())
	default:
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err while running = %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped not closed after Run returned")
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after a graceful stop = %v, want nil", err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, worker.ErrAlreadyRan) {
		t.Errorf("second Run = %v", err)
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after a refused second Run = %v, want the first Run's nil", err)
	}

	// A worker that cannot start: its check's error.
	missing, err := worker.New(worker.Brokers(b.c.Seeds...), worker.Group(b.group), worker.Logger(shareqtest.Logger()),
		worker.Handle("no-such-topic-"+b.topic, h), worker.StartTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runErr := missing.Run(t.Context())
	<-missing.Stopped()
	if !errors.Is(runErr, worker.ErrTopicMissing) || missing.Err() != runErr {
		t.Errorf("Run = %v, Err = %v; want ErrTopicMissing from both", runErr, missing.Err())
	}
}

// A job that runs past its topic's job timeout has its context cancelled
// with cause ErrJobTimeout and is retried; the next delivery, quick,
// succeeds. A topic with TopicJobTimeout 0 has no timeout although the
// worker has a default.
func TestJobTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	untimed := b.c.Topic(t, 1)
	b.produce(t, "slow")
	b.c.Produce(t, &kgo.Record{Topic: untimed, Key: []byte("untimed")})

	var causes sync.Map // key → the cause its first delivery's context ended with
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if job.DeliveryCount > 1 {
			return nil
		}
		if string(job.Key) == "untimed" {
			select {
			case <-release: // the test lets it go once "slow" timed out
				causes.Store("untimed", context.Cause(ctx))
				return nil
			case <-ctx.Done():
				causes.Store("untimed", context.Cause(ctx))
				return ctx.Err()
			}
		}
		<-ctx.Done()
		causes.Store(string(job.Key), context.Cause(ctx))
		return ctx.Err()
	})
	var logs logbuf.Buffer
	stop := b.start(t, h, worker.Concurrency(2), worker.RetryBackoff(nil), worker.AutoOffsetReset("earliest"),
		worker.JobTimeout(300*time.Millisecond), worker.Handle(untimed, h), worker.TopicJobTimeout(untimed, 0),
		worker.Logger(slog.New(slog.NewTextHandler(&logs, nil))))

	b.obs.WaitFor(t, 30*time.Second, "the slow job timed out", func(fs []finished) bool {
		return count(fs, "slow", worker.AckRelease) == 1
	})
	close(release)
	fs := b.obs.WaitFor(t, 30*time.Second, "both jobs accepted", func(fs []finished) bool {
		return count(fs, "slow", worker.AckAccept) == 1 && count(fs, "untimed", worker.AckAccept) == 1
	})
	for _, f := range fs {
		switch {
		case f.Key == "slow" && f.Count == 1:
			if f.Result.Outcome != worker.OutcomeRetried || !errors.Is(f.Result.Err, worker.ErrJobTimeout) ||
				!errors.Is(f.Result.Err, context.DeadlineExceeded) || handler.ReasonOf(f.Result.Err) != handler.ReasonTimeout {
				t.Errorf("timed-out delivery: %+v, want retried with ErrJobTimeout and reason timeout", f.Result)
			}
			if f.Result.Duration < 300*time.Millisecond {
				t.Errorf("timed out after %v, before its 300ms", f.Result.Duration)
			}
		case f.Key == "untimed":
			if f.Count != 1 || f.Result.Outcome != worker.OutcomeSucceeded {
				t.Errorf("untimed topic's job: delivery %d %+v, want a success on delivery 1", f.Count, f.Result)
			}
		default:
			if f.Result.Outcome != worker.OutcomeSucceeded {
				t.Errorf("%s delivery %d: %+v", f.Key, f.Count, f.Result)
			}
		}
	}
	if c, _ := causes.Load("slow"); c != worker.ErrJobTimeout {
		t.Errorf("slow job's context ended with %v, want ErrJobTimeout", c)
	}
	if c, _ := causes.Load("untimed"); c != nil {
		t.Errorf("untimed job's context ended with %v, want still running", c)
	}
	// The stop line counts the jobs by outcome.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "msg=\"worker stopped\"") ||
		!strings.Contains(out, " succeeded=2 parked=0 retried=1 discarded=0 interrupted=0 ") {
		t.Errorf("stop line lacks the outcome counts:\n%s", out)
	}
}

// A group that starts at the log end (Kafka's default, no
// AutoOffsetReset) says once, at its start, how many records already in
// its topics it will not run, and how to run them. There is no such line
// with AutoOffsetReset("earliest"), for a topic with nothing in it, or
// once the group has started the partitions.
func TestStartAtLogEndSaysWhatItLeaves(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	b.produce(t, "a", "b", "c")
	const line = "starts these topics at their log end"

	b.group = b.c.GroupWith(t, nil) // the broker's default: latest
	_, err, logs := checkWorker(t, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{line, "records=3", "topics=[" + b.topic + "]", `worker.AutoOffsetReset(\"earliest\")`, "shareq reset " + b.group + " -to earliest"} {
		if !strings.Contains(logs, want) {
			t.Errorf("a new group at latest, 3 records waiting: %q missing from the log:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, line); n != 1 {
		t.Errorf("%d lines, want 1:\n%s", n, logs)
	}

	b.group = b.c.GroupWith(t, nil)
	if _, err, logs := checkWorker(t, b, worker.AutoOffsetReset("earliest")); err != nil || strings.Contains(logs, line) {
		t.Errorf("AutoOffsetReset(earliest): %v, log:\n%s", err, logs)
	}
	empty := setup(t, 1)
	empty.group = empty.c.GroupWith(t, nil)
	if _, err, logs := checkWorker(t, empty); err != nil || strings.Contains(logs, line) {
		t.Errorf("an empty topic: %v, log:\n%s", err, logs)
	}

	// Started: the group has its own start offsets (Kafka writes them
	// with the first acknowledgements; until then it describes -1, and a
	// partition at -1 starts at the log end again), and says nothing of
	// the records before them.
	b.group = b.c.GroupWith(t, nil)
	var mu sync.Mutex
	var ran []string
	stop := b.start(t, handler.Func(func(_ context.Context, j *handler.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, string(j.Key))
		return nil
	}))
	// Records produced once the worker has started the partitions run,
	// and their acknowledgements write the start offsets; until then
	// each look produces four more (keys that reach both partitions).
	started := func() bool {
		b.produce(t, "after-1", "after-2", "after-3", "after-4")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := b.c.Admin().DescribeShareGroupOffsets(ctx, b.group)
		if err != nil {
			return false
		}
		for p := range int32(2) {
			if o, ok := d[b.group].Offsets.Lookup(b.topic, p); !ok || o.Err != nil || o.StartOffset < 0 {
				return false
			}
		}
		return true
	}
	waitFor(t, 60*time.Second, "the group's start offsets in both partitions", started)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range ran {
		if !strings.HasPrefix(k, "after-") {
			t.Errorf("record %q, produced before the group started at latest, ran", k)
		}
	}
	if _, err, logs := checkWorker(t, b); err != nil || strings.Contains(logs, line) {
		t.Errorf("a started group: %v, log:\n%s", err, logs)
	}
}

// Short jobs on large producer batches are fetched a whole batch at a
// time (batch_optimized; the executor grants credit in batches,
// prefetchFor), not in slivers of the credit that splits batches, each of
// which costs Kafka a read of the whole batch: after the first fetches,
// sized before the worker knows its rate, they take whole batches (one
// or more: at least a quarter as many such fetches as batches, where
// fetches that split batches took none whole), and every record runs
// once, on its first delivery.
func TestShortJobsFetchWholeProducerBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const batches, size = 100, 200
	for i := range batches {
		recs := make([]*kgo.Record, size)
		for j := range recs {
			recs[j] = &kgo.Record{Topic: b.topic, Value: fmt.Appendf(nil, "b%d-%d", i, j)}
		}
		b.c.ProduceBatch(t, recs...)
	}
	var mu sync.Mutex
	runs := map[int64]int{}
	var again int
	all := make(chan struct{})
	nop := handler.Func(func(_ context.Context, j *handler.Job) error {
		mu.Lock()
		defer mu.Unlock()
		runs[j.Offset]++
		if j.DeliveryCount != 1 {
			again++
		}
		if len(runs) == batches*size && runs[j.Offset] == 1 {
			close(all)
		}
		return nil
	})
	stats := new(memberStatsLog)
	began := time.Now()
	stop := b.start(t, nop, worker.Concurrency(10), worker.Observers(stats))
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatalf("not every job ran within 60 s")
	}
	t.Logf("%s: %d jobs in %v", b.c.Kind, batches*size, time.Since(began).Round(time.Millisecond))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != batches*size || again != 0 {
		t.Fatalf("%d records ran, %d on a later delivery; want %d, each on its first", len(runs), again, batches*size)
	}
	for off, n := range runs {
		if n != 1 {
			t.Fatalf("offset %d ran %d times", off, n)
		}
	}
	stats.mu.Lock()
	last := stats.last[len(stats.last)-1]
	stats.mu.Unlock()
	t.Logf("%s: %d fetches, %d of whole producer batches, %d records", b.c.Kind, last.Fetches, last.WholeBatchFetches, last.Fetched)
	if last.Fetched != batches*size || last.WholeBatchFetches < batches/4 {
		t.Fatalf("%d records fetched in %d fetches, %d of them of whole batches; want %d, and at least %d fetches of whole batches", last.Fetched, last.Fetches, last.WholeBatchFetches, batches*size, batches/4)
	}
}
