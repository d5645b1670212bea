package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// crashWorkerEnv, set to "seeds|group|topic|session-ms", makes the test
// binary a crash worker: a worker.Worker that runs (and accepts) the
// jobs of its partitions until it is killed.
const crashWorkerEnv = "SHAREQ_TEST_CRASH_WORKER"

// runCrashWorker makes the test binary a crash worker when it was started
// as one by startCrashWorker; it then never returns. It prints
// "PARTITIONS n" each time the number of partitions its member is
// assigned changes.
func runCrashWorker() {
	v := os.Getenv(crashWorkerEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	ms, _ := strconv.Atoi(parts[3])
	w, err := worker.New(worker.Brokers(strings.Split(parts[0], ",")...), worker.Group(parts[1]),
		worker.Handle(parts[2], handler.Func(func(context.Context, *handler.Job) error { return nil })),
		worker.SessionTimeout(time.Duration(ms)*time.Millisecond),
		worker.Observers(&partitionsPrinter{Observer: new(shareqtest.Observer)}),
		worker.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	// Bounded, should the parent die without killing it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fmt.Println("ERR Run returned", w.Run(ctx))
	os.Exit(3)
}

// partitionsPrinter prints the member's partition count when it changes.
type partitionsPrinter struct {
	*shareqtest.Observer
	last atomic.Int64
}

func (p *partitionsPrinter) MemberStats(s worker.MemberStats) {
	if p.last.Swap(int64(s.Partitions)+1) != int64(s.Partitions)+1 {
		fmt.Println("PARTITIONS", s.Partitions)
	}
}

// startCrashWorker runs a crash worker in a child process and returns a
// channel of the partition counts it reports and a func that kills it
// with SIGKILL, as the kernel's OOM killer or a lost node would: it never
// acknowledges, closes its sessions or leaves the group. A kill, not an
// abrupt Close in this process: only a dead process is sure to send
// nothing more, and a closed client's goroutines would stay behind.
func startCrashWorker(t *testing.T, c *kafkatest.Cluster, group, topic string, session time.Duration) (partitions <-chan int, kill func()) {
	t.Helper()
	lines, kill := kafkatest.StartChild(t, fmt.Sprintf("%s=%s|%s|%s|%d", crashWorkerEnv, strings.Join(c.Seeds, ","), group, topic, session.Milliseconds()))
	ch := make(chan int, 100)
	go func() { // ends when the child exits
		defer close(ch)
		for line := range lines {
			var n int
			if _, err := fmt.Sscanf(line, "PARTITIONS %d", &n); err == nil {
				select {
				case ch <- n:
				default: // nobody reads: the child reports changes only
				}
			}
		}
	}()
	return ch, kill
}

// waitPartitions waits until the crash worker reports n partitions.
func waitPartitions(t *testing.T, ch <-chan int, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatal("the crash worker exited")
			}
			if got == n {
				return
			}
		case <-deadline:
			t.Fatalf("the crash worker did not get %d partitions within %v", n, timeout)
		}
	}
}

// ranOn records, per partition, when the worker first started a job of
// it produced after a given time.
type ranOn struct {
	mu    sync.Mutex
	after time.Time // only jobs produced after it count; zero: all
	first map[int32]time.Time
}

func (r *ranOn) record(job *handler.Job) {
	produced, _ := strconv.ParseInt(string(job.Value), 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Unix(0, produced).Before(r.after) {
		return
	}
	if _, ok := r.first[job.Partition]; !ok {
		r.first[job.Partition] = time.Now()
	}
}

// reset forgets what ran and counts only jobs produced after now; it
// returns the partitions that had run.
func (r *ranOn) reset(now time.Time) map[int32]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.first
	r.first, r.after = map[int32]time.Time{}, now
	return old
}

func (r *ranOn) snapshot() map[int32]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int32]time.Time, len(r.first))
	for p, at := range r.first {
		out[p] = at
	}
	return out
}

// A worker killed with SIGKILL under load: the other worker of the group
// runs the dead one's partitions once the coordinator fences it, within
// the group's session timeout plus a heartbeat interval (and the
// assignment interval), and not before the session timeout minus a
// heartbeat interval: the session timeout is what bounds the failover.
// On Kafka that is the group's share.session.timeout.ms, set by
// SessionTimeout; kfake uses its broker config (3 s).
//
// To measure other sessions (RELIABILITY.md), SHAREQ_TEST_FAILOVER_SESSION
// sets the SessionTimeout both workers ask for (default 2s; 0 leaves the
// group alone) and SHAREQ_TEST_FAILOVER_GROUP ("k=v,k=v") group configs
// set before they start.
func TestKilledWorkerPartitionsMoveWithinSessionTimeout(t *testing.T) {
	t.Parallel()
	const partitions = 4
	b := setup(t, partitions)
	asked := 2 * time.Second
	if v := os.Getenv("SHAREQ_TEST_FAILOVER_SESSION"); v != "" {
		var err error
		if asked, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SHAREQ_TEST_FAILOVER_SESSION: %v", err)
		}
	}
	if v := os.Getenv("SHAREQ_TEST_FAILOVER_GROUP"); v != "" {
		kv := map[string]string{}
		for _, p := range strings.Split(v, ",") {
			k, v, _ := strings.Cut(p, "=")
			kv[k] = v
		}
		b.c.SetGroupConfig(t, b.group, kv)
	}
	childParts, kill := startCrashWorker(t, b.c, b.group, b.topic, asked)
	waitPartitions(t, childParts, partitions, 60*time.Second)

	// Load: a record on every partition every 20 ms, its value the time
	// it was produced.
	prod := b.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	pctx, stopProducing := context.WithCancel(context.Background())
	var producing sync.WaitGroup
	producing.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			for p := range int32(partitions) {
				prod.Produce(pctx, &kgo.Record{Topic: b.topic, Partition: p, Value: []byte(strconv.FormatInt(time.Now().UnixNano(), 10))}, nil)
			}
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopProducing(); producing.Wait() }()

	ran := &ranOn{first: map[int32]time.Time{}}
	h := handler.Func(func(_ context.Context, job *handler.Job) error { ran.record(job); return nil })
	b.start(t, h, worker.SessionTimeout(asked))
	// The group splits the partitions between the two
	// (docs/architecture.md, fact 17): wait until the child has half and this worker has run jobs
	// from the other half.
	waitPartitions(t, childParts, partitions/2, 60*time.Second)
	ran.reset(time.Now())
	b.obs.WaitFor(t, 30*time.Second, "jobs of this worker's partitions", func([]finished) bool { return len(ran.snapshot()) == partitions/2 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session, heartbeat, assignEvery := groupTimers(ctx, t, b)
	if wantHB := (asked / 6).Truncate(time.Millisecond); b.c.HonoursGroupSessionTimeout && asked > 0 && allows(ctx, t, b, asked) &&
		(session != asked || heartbeat != wantHB) {
		t.Fatalf("group session timeout %v, heartbeat %v; SessionTimeout(%v) asked for %v and %v", session, heartbeat, asked, asked, wantHB)
	}

	killed := time.Now()
	kill()
	own := ran.reset(killed)
	bound := session + heartbeat + assignEvery
	const slack = 3 * time.Second // a busy 2-core machine: the survivor's next fetch, the kill
	b.obs.WaitFor(t, bound+slack+10*time.Second, "the dead worker's partitions running here", func([]finished) bool {
		return len(ran.snapshot()) == partitions
	})
	var took time.Duration
	for p, at := range ran.snapshot() {
		if _, mine := own[p]; !mine {
			took = max(took, at.Sub(killed))
		}
	}
	t.Logf("%s: the killed worker's partitions ran here %v after the kill (session timeout %v, heartbeat %v, assignment interval %v)",
		b.c.Kind, took.Round(time.Millisecond), session, heartbeat, assignEvery)
	if took > bound+slack {
		t.Errorf("failover took %v, above the group's session timeout + heartbeat + assignment interval (%v) + %v", took, bound, slack)
	}
	// The member's last heartbeat reached the coordinator at most an
	// interval and a round trip before the kill.
	if low := session - heartbeat - 500*time.Millisecond; took < low {
		t.Errorf("failover took %v, below the session timeout minus a heartbeat and a round trip (%v): something other than the session timeout moved the partitions", took, low)
	}
}

// allows reports whether the brokers' bounds allow session timeout d and
// its heartbeat interval (a default broker allows nothing below 45 s).
func allows(ctx context.Context, t *testing.T, b *bundle, d time.Duration) bool {
	t.Helper()
	m, err := groupcfg.Broker(ctx, b.c.Client(t), groupcfg.BrokerMinSessionTimeoutMs, groupcfg.BrokerMinHeartbeatIntervalMs)
	if err != nil {
		t.Fatal(err)
	}
	minS, _ := strconv.Atoi(m[groupcfg.BrokerMinSessionTimeoutMs])
	minH, _ := strconv.Atoi(m[groupcfg.BrokerMinHeartbeatIntervalMs])
	return int64(minS) <= d.Milliseconds() && int64(minH) <= (d/6).Milliseconds()
}

// groupTimers returns the group's effective share session timeout,
// heartbeat interval and assignment interval: its group configs on Kafka,
// the broker's on kfake (which has no assignment interval).
func groupTimers(ctx context.Context, t *testing.T, b *bundle) (session, heartbeat, assignEvery time.Duration) {
	t.Helper()
	ms := func(m map[string]string, k string) time.Duration {
		n, err := strconv.Atoi(m[k])
		if err != nil {
			t.Fatalf("config %s = %q in %v", k, m[k], m)
		}
		return time.Duration(n) * time.Millisecond
	}
	if !b.c.HonoursGroupSessionTimeout {
		m, err := groupcfg.Broker(ctx, b.c.Client(t), groupcfg.BrokerSessionTimeoutMs, groupcfg.BrokerHeartbeatIntervalMs)
		if err != nil {
			t.Fatal(err)
		}
		return ms(m, groupcfg.BrokerSessionTimeoutMs), ms(m, groupcfg.BrokerHeartbeatIntervalMs), 0
	}
	m, err := groupcfg.Describe(ctx, b.c.Client(t), b.group, groupcfg.SessionTimeoutMs, groupcfg.HeartbeatIntervalMs, groupcfg.AssignmentIntervalMs)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m[groupcfg.AssignmentIntervalMs]; ok { // Kafka 4.3+
		assignEvery = ms(m, groupcfg.AssignmentIntervalMs)
	}
	return ms(m, groupcfg.SessionTimeoutMs), ms(m, groupcfg.HeartbeatIntervalMs), assignEvery
}
