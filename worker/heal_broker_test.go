package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/brokerprobe"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// envStallBroker names the port base of the private broker the stall
// tests SIGKILL (scripts/kafka-cluster.sh, one node, listening on the
// base + 100); unset, they are skipped. They need a JDK and the Kafka
// jars scripts/kafka.sh fetches (SHAREQ_CACHE_DIR, KAFKA_VERSION).
const envStallBroker = "SHAREQ_TEST_STALL_BROKER_PORT_BASE"

// stallBroker returns the private one-node broker of the stall tests and
// its seeds, starting it (and stopping it with the test) unless it runs.
func stallBroker(t *testing.T) (brokerprobe.Cluster, string, []string) {
	t.Helper()
	return privateCluster(t, envStallBroker, 1, "kafka-stall", "the test SIGKILLs a private broker of its own", 27300)
}

// privateCluster returns a private cluster of scripts/kafka-cluster.sh of
// nodes nodes, on ports from the port base in the environment variable
// env (the test is skipped, saying why it needs one, when it is unset),
// its data under .cache/<dir>-<base>, and its seeds. It starts the
// cluster unless it runs, and then SIGKILLs its nodes when t ends: a
// controlled shutdown of the last nodes of a cluster waits out the
// quorum they lost (half a minute), and the next up wipes the data
// anyway.
func privateCluster(t *testing.T, env string, nodes int, dir, why string, example int) (brokerprobe.Cluster, string, []string) {
	t.Helper()
	base, err := strconv.Atoi(os.Getenv(env))
	if err != nil {
		t.Skipf("%s is not a port base: %s (set it, e.g. %s=%d, to run it)", env, why, env, example)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	c := brokerprobe.Cluster{Nodes: nodes, PortBase: base, Dir: filepath.Join(repo, ".cache", dir+"-"+strconv.Itoa(base))}
	ctx := context.Background()
	if _, err := c.Script(ctx, repo, "status"); err != nil {
		if _, err := c.Script(ctx, repo, "up"); err != nil {
			t.Fatalf("start the private cluster: %v", err)
		}
		t.Cleanup(func() {
			for n := 1; n <= c.Nodes; n++ {
				if err := c.Stop(context.Background(), repo, n, true); err != nil {
					t.Errorf("stop the private cluster: %v", err)
				}
			}
		})
	}
	seeds, err := c.Seeds(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	return c, repo, seeds
}

// healRecords records the jobs run, the stall reports and the heals.
type healRecords struct {
	worker.NopObserver
	mu       sync.Mutex
	runs     map[int64]int // runs per offset
	redeliv  int           // runs on a delivery count above 1
	stallAt  time.Time     // the first stall report
	heals    []string
	healAt   time.Time        // the first heal's end
	firstRun time.Time        // the first job run after the stall report
	opened   map[string]int64 // share sessions opened, by member
	reset    map[string]int64 // share sessions reset, by member
}

func (r *healRecords) MemberStats(s worker.MemberStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opened[s.MemberID], r.reset[s.MemberID] = s.SessionsOpened, s.SessionsReset
}

// sessionsOpen reports whether n members have opened a share session.
func (r *healRecords) sessionsOpen(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	open := 0
	for _, o := range r.opened {
		if o > 0 {
			open++
		}
	}
	return open >= n
}

func (r *healRecords) PartitionStalled(_ string, _ int32, stalled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stalled && r.stallAt.IsZero() {
		r.stallAt = time.Now()
	}
}

func (r *healRecords) StallHealed(_ string, _ int32, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heals = append(r.heals, result)
	if result == worker.HealFreed && r.healAt.IsZero() {
		r.healAt = time.Now()
	}
}

func (r *healRecords) run(j *handler.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[j.Offset]++
	if j.DeliveryCount > 1 {
		r.redeliv++
	}
	if !r.stallAt.IsZero() && r.firstRun.IsZero() {
		r.firstRun = time.Now()
	}
}

// freed reports whether a heal ended freed.
func (r *healRecords) freed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.heals, worker.HealFreed)
}

// ranFrom reports how many offsets from..to-1 ran at least once.
func (r *healRecords) ranFrom(from, to int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for o := from; o < to; o++ {
		if r.runs[o] > 0 {
			n++
		}
	}
	return n
}

// On Apache Kafka 4.3.1 and 4.4.0 a share partition stalls after a
// broker restart (RELIABILITY.md, "A partition the broker stops
// serving"): the broker probe's full-timeout-first steps make it with a
// member of its own (brokerprobe.Driver.MakeStall: the limit 100 in
// flight, 0-9 held across a SIGKILL, offset 0 acquired again after its
// lock ran out). Two workers with HealStalls then take the partition
// over (the probe's member leaves, its session closed only once theirs
// are open, so the broker keeps the stall): they find it stalled and
// free it themselves, and every record waiting runs, once, on its first
// delivery.
func TestWorkersHealAStalledPartition(t *testing.T) {
	c, repo, seeds := stallBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	topic, group := kafkatest.Name(t, "stall"), kafkatest.Name(t, "stall")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerLinger(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic), kgo.RetryTimeout(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const locks, lock = 100, 10 * time.Second
	id, err := brokerprobe.Prepare(ctx, cl, topic, group, locks, int(lock.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := brokerprobe.VariantNamed("full-timeout-first", locks)
	if err := brokerprobe.ProduceBatches(ctx, cl, v.Batches); err != nil {
		t.Fatal(err)
	}
	produced := int64(0)
	for _, n := range v.Batches {
		produced += int64(n)
	}
	m := brokerprobe.NewMember(seeds, group, topic, id)
	defer m.Close()
	if err := m.Join(ctx); err != nil {
		t.Fatal(err)
	}
	d := brokerprobe.NewDriver(m, t.Logf)
	restart := func(ctx context.Context) error {
		if err := c.Stop(ctx, repo, 1, true); err != nil {
			return err
		}
		return c.Start(ctx, repo, 1)
	}
	if err := d.MakeStall(ctx, v, lock, restart); err != nil {
		t.Fatal(err)
	}
	waiting := d.MaxAcquired + 1
	t.Logf("the probe's member acquired up to %d of %d: %d records wait", d.MaxAcquired, produced, produced-waiting)
	m.Leave()

	// The workers, with their own control and status topics.
	adm := kadm.NewClient(cl)
	statuses := kafkatest.Name(t, "workers")
	if _, err := adm.CreateTopic(ctx, 1, 1, fleet.TopicConfigs(), statuses); err != nil {
		t.Fatal(err)
	}
	rec := &healRecords{runs: map[int64]int{}, opened: map[string]int64{}, reset: map[string]int64{}}
	h := handler.Func(func(_ context.Context, j *handler.Job) error {
		rec.run(j)
		return nil
	})
	controls := kafkatest.Name(t, "controls")
	for _, name := range []string{"heal-a", "heal-b"} {
		w, err := worker.New(worker.Brokers(seeds...), worker.Group(group), worker.Handle(topic, h),
			worker.Observers(rec), worker.Logger(shareqtest.Logger()), worker.ShutdownTimeout(5*time.Second),
			worker.ClientOpts(kgo.ClientID(name)), worker.HealStalls(true), worker.StallCheckTimes(15*time.Second, time.Second),
			worker.FetchMaxWait(500*time.Millisecond), worker.StatusTopic(statuses), worker.StatusEvery(time.Second),
			worker.ControlTopic(controls))
		if err != nil {
			t.Fatal(err)
		}
		kafkatest.Run(t, w.Run)
	}
	waitJoinedOn(t, cl, statuses, group, 2)
	// Once both workers have opened their share sessions the probe's
	// member goes: the group keeps sessions on the broker, which keeps
	// the stalled state.
	for !rec.sessionsOpen(2) {
		if ctx.Err() != nil {
			t.Fatal("the workers opened no share session")
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.Close()
	brokerprobe.Produce(ctx, cl, int(produced), 100, func(err error) { t.Errorf("produce: %v", err) })
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	produced += 100

	deadline := time.Now().Add(4 * time.Minute)
	for rec.ranFrom(waiting, produced) < int(produced-waiting) {
		if time.Now().After(deadline) {
			rec.mu.Lock()
			t.Fatalf("%d of the %d records waiting ran within 4 minutes; stall reported at %v, heals %v",
				rec.ranFrom(waiting, produced), produced-waiting, rec.stallAt, rec.heals)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for !rec.freed() {
		if time.Now().After(deadline) {
			rec.mu.Lock()
			t.Fatalf("no heal freed the partition within 4 minutes (heals %v)", rec.heals)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.stallAt.IsZero() {
		t.Fatalf("the partition moved with no stall reported (heals %v)", rec.heals)
	}
	again := 0
	for o, n := range rec.runs {
		if o < waiting || n > 1 {
			again += n
		}
	}
	t.Logf("share sessions reset per member (the heal replaced them): %v", rec.reset)
	t.Logf("heals %v; stall reported; the heal that freed it ended %.1f s later; the first job ran %.1f s after the report; %d records waiting all ran, %d redelivered (runs of a record done or run before: %d)",
		rec.heals, rec.healAt.Sub(rec.stallAt).Seconds(), rec.firstRun.Sub(rec.stallAt).Seconds(), produced-waiting, rec.redeliv, again)
	if rec.redeliv > 0 || again > 0 {
		t.Errorf("%d jobs ran on a delivery count above 1 and %d runs were of records done or run before: want none", rec.redeliv, again)
	}
}

// waitJoinedOn waits until n workers of group publish a member ID in
// the status topic, read through cl.
func waitJoinedOn(t *testing.T, cl *kgo.Client, topic, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ws, err := fleet.Read(context.Background(), cl, topic, time.Now())
		joined := 0
		for _, s := range fleet.OfGroup(ws, group) {
			if s.MemberID != "" && s.State == "joined" {
				joined++
			}
		}
		if err == nil && joined == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers joined within 60 s (%v)", joined, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
