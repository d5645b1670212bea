package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/fleet"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// statusTopic creates a status topic of the test's own.
func statusTopic(t *testing.T, c *kafkatest.Cluster) string {
	t.Helper()
	name := kafkatest.Name(t, "workers")
	c.CreateTopicWith(t, name, 1, fleet.TopicConfigs())
	return name
}

// waitWorkers waits until the group's workers listed in topic satisfy
// ok, and returns them.
func waitWorkers(t *testing.T, c *kafkatest.Cluster, topic, group string, timeout time.Duration, what string, ok func([]fleet.Status) bool) []fleet.Status {
	t.Helper()
	cl := c.Client(t)
	deadline := time.Now().Add(timeout)
	for {
		ws, err := fleet.Read(context.Background(), cl, topic, time.Now())
		ws = fleet.OfGroup(ws, group)
		if err == nil && ok(ws) {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s: %s not within %v: workers %+v, error %v", c.Kind, c.Version, what, timeout, ws, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func names(ws []fleet.Status) []string {
	out := make([]string, len(ws))
	for i, s := range ws {
		out[i] = s.Name
	}
	return out
}

// Two workers each publish their status: both are listed with what they
// run; one stopped gracefully leaves the list at once (its tombstone),
// the other stays.
func TestStatusListsWorkersAndDropsOneThatStops(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	topic := statusTopic(t, b.c)
	h := handler.Func(func(context.Context, *handler.Job) error { return nil })
	stopA := b.start(t, h, worker.StatusTopic(topic), worker.Concurrency(3), worker.ClientOpts(kgo.ClientID("worker-a")))
	b.start(t, h, worker.StatusTopic(topic), worker.Concurrency(5), worker.ClientOpts(kgo.ClientID("worker-b")))

	ws := waitWorkers(t, b.c, topic, b.group, 30*time.Second, "both workers joined", func(ws []fleet.Status) bool {
		return len(ws) == 2 && ws[0].State == "joined" && ws[1].State == "joined"
	})
	host, _ := os.Hostname()
	for i, want := range []struct {
		name string
		conc int
	}{{"worker-a", 3}, {"worker-b", 5}} {
		s := ws[i]
		if s.Name != want.name || s.Concurrency != want.conc || s.Group != b.group || !slices.Equal(s.Topics, []string{b.topic}) ||
			s.Host != host || s.PID != os.Getpid() || s.Version == "" || s.Instance == "" || s.MemberID == "" ||
			s.StartedAt.IsZero() || s.Every != worker.StatusEveryDefault || len(s.DependenciesDown) != 0 {
			t.Errorf("worker %d: %+v, want %s with concurrency %d on %s of %s, this host and pid", i, s, want.name, want.conc, b.topic, b.group)
		}
		if age := time.Since(s.LastSeen); age < 0 || age > fleet.StaleAfter*worker.StatusEveryDefault {
			t.Errorf("worker %s: last seen %v ago", s.Name, age)
		}
	}
	if ws[0].Instance == ws[1].Instance {
		t.Errorf("both workers have instance %s", ws[0].Instance)
	}

	if err := stopA(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// At once: the very next read, not within the stale bound.
	ws, err := fleet.Read(context.Background(), b.c.Client(t), topic, time.Now())
	if ws = fleet.OfGroup(ws, b.group); err != nil || !slices.Equal(names(ws), []string{"worker-b"}) {
		t.Fatalf("%s %s: after worker-a stopped: workers %v (%v), want worker-b only", b.c.Kind, b.c.Version, names(ws), err)
	}
}

// A worker reports its running jobs and its dependencies down within a
// second or so of the change, not at its next interval.
func TestStatusShowsRunningJobsAndDependenciesDown(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	topic := statusTopic(t, b.c)
	release := make(chan struct{})
	h := handler.Func(func(ctx context.Context, job *handler.Job) error {
		if string(job.Key) == "down" {
			return handler.Unavailable("billing-api", fmt.Errorf("billing is down"))
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	b.start(t, h, worker.StatusTopic(topic), worker.StatusEvery(time.Minute))
	waitWorkers(t, b.c, topic, b.group, 30*time.Second, "the worker joined", func(ws []fleet.Status) bool {
		return len(ws) == 1 && ws[0].State == "joined"
	})
	b.produce(t, "slow")
	waitWorkers(t, b.c, topic, b.group, 10*time.Second, "one job running", func(ws []fleet.Status) bool {
		return len(ws) == 1 && ws[0].Running == 1 && ws[0].Held >= 1
	})
	close(release)
	b.produce(t, "down")
	waitWorkers(t, b.c, topic, b.group, 10*time.Second, "billing-api down", func(ws []fleet.Status) bool {
		return len(ws) == 1 && slices.Equal(ws[0].DependenciesDown, []string{"billing-api"})
	})
}

// statusWorkerEnv, set to "seeds|group|topic|status-topic", makes the test
// binary a status worker: a worker that publishes its status every
// second until it is killed.
const statusWorkerEnv = "SHAREQ_TEST_STATUS_WORKER"

// runStatusWorker makes the test binary a status worker when it was
// started as one; it then never returns.
func runStatusWorker() {
	v := os.Getenv(statusWorkerEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	w, err := worker.New(worker.Brokers(strings.Split(parts[0], ",")...), worker.Group(parts[1]),
		worker.Handle(parts[2], handler.Func(func(context.Context, *handler.Job) error { return nil })),
		worker.StatusTopic(parts[3]), worker.StatusEvery(time.Second),
		worker.ClientOpts(kgo.ClientID("status-worker-"+strconv.Itoa(os.Getpid()))),
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

// A worker whose process is killed writes no tombstone: it leaves the
// list once its last status is StaleAfter intervals old (3 s at
// StatusEvery(1s)), not before its bound and not long after.
func TestStatusDropsKilledWorkerWithinItsBound(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	topic := statusTopic(t, b.c)
	_, kill := kafkatest.StartChild(t, fmt.Sprintf("%s=%s|%s|%s|%s", statusWorkerEnv, strings.Join(b.c.Seeds, ","), b.group, b.topic, topic))
	ws := waitWorkers(t, b.c, topic, b.group, 30*time.Second, "the child worker listed", func(ws []fleet.Status) bool {
		return len(ws) == 1 && ws[0].State == "joined"
	})
	if ws[0].PID == os.Getpid() || ws[0].Every != time.Second {
		t.Fatalf("listed %+v, want the child's status at 1s", ws[0])
	}
	kill()
	killed := time.Now()
	bound := fleet.StaleAfter * time.Second
	waitWorkers(t, b.c, topic, b.group, bound+5*time.Second, "the killed worker gone", func(ws []fleet.Status) bool { return len(ws) == 0 })
	gone := time.Since(killed)
	if gone > bound+2*time.Second {
		t.Errorf("the killed worker left the list %v after the kill, want within its bound %v (and a read)", gone, bound)
	}
	t.Logf("%s %s: killed worker left the list %v after the kill (bound %v)", b.c.Kind, b.c.Version, gone.Round(10*time.Millisecond), bound)
}

// A worker whose status topic does not exist logs one line saying what
// to run, and runs its jobs as ever.
func TestStatusTopicMissingLogsOneLineAndRunsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	logs := new(logbuf.Buffer)
	missing := kafkatest.Name(t, "no-workers")
	b.start(t, handler.Func(func(context.Context, *handler.Job) error { return nil }),
		worker.StatusTopic(missing), worker.StatusEvery(time.Second), worker.StatusRecheck(100*time.Millisecond),
		worker.Logger(slog.New(slog.NewTextHandler(logs, nil))))
	b.produce(t, "a", "b")
	waitKeys(t, b, 30*time.Second, "a", "b")
	// The topic is looked for again every 100 ms: the line is not
	// repeated over many of them.
	waitLog(t, logs, "does not exist", 10*time.Second)
	time.Sleep(2 * time.Second)
	got := strings.Count(logs.String(), "status topic "+missing)
	want := "shareq topics create -workers -workers-topic " + missing + " -brokers " + strings.Join(b.c.Seeds, ",")
	if got != 1 || !strings.Contains(logs.String(), want) {
		t.Errorf("%d lines about the status topic, want 1 saying to run %q; logs:\n%s", got, want, logs.String())
	}
}

// StatusTopic("") turns publishing off: the worker runs its jobs and
// says nothing about a status topic (on a cluster without one, a worker
// publishing would log a line).
func TestStatusTopicOffSaysNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	logs := new(logbuf.Buffer)
	stop := b.start(t, handler.Func(func(context.Context, *handler.Job) error { return nil }),
		worker.StatusTopic(""), worker.Logger(slog.New(slog.NewTextHandler(logs, nil))))
	b.produce(t, "a")
	waitKeys(t, b, 30*time.Second, "a")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "status topic") {
		t.Errorf("a worker with StatusTopic(\"\") logged about a status topic:\n%s", logs.String())
	}
}

// New refuses a status interval out of its bounds and a status topic
// name Kafka would refuse, naming the option.
func TestStatusOptionsValidated(t *testing.T) {
	t.Parallel()
	nop := handler.Func(func(context.Context, *handler.Job) error { return nil })
	for i, tc := range []struct {
		opt  worker.Option
		want string // "" for valid
	}{
		{worker.StatusEvery(time.Second), ""},
		{worker.StatusEvery(time.Minute), ""},
		{worker.StatusEvery(999 * time.Millisecond), "StatusEvery(999ms): must be from 1s to 1m0s"},
		{worker.StatusEvery(2 * time.Minute), "StatusEvery(2m0s): must be from 1s to 1m0s"},
		{worker.StatusTopic(""), ""},
		{worker.StatusTopic("bad topic"), `StatusTopic("bad topic")`},
	} {
		_, err := worker.New(worker.Brokers("127.0.0.1:9092"), worker.Group("g"), worker.Handle("t", nop), tc.opt)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("case %d: %v, want no error", i, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("case %d: error %v, want one saying %q", i, err, tc.want)
		}
	}
}
