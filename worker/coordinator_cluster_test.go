package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/brokerprobe"
	"github.com/shareq/shareq/internal/groupcfg"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// envCoordinatorCluster names the port base of the private 3-node cluster
// the coordinator test stops a node of (scripts/kafka-cluster.sh, node N
// listening on the base + 100·N); unset, the test is skipped. It needs a
// JDK and the Kafka jars scripts/kafka.sh fetches.
const envCoordinatorCluster = "SHAREQ_TEST_COORDINATOR_CLUSTER_PORT_BASE"

// coordinatorCluster returns the private 3-node cluster of the
// coordinator test and its seeds (privateCluster).
func coordinatorCluster(t *testing.T) (brokerprobe.Cluster, string, []string) {
	t.Helper()
	return privateCluster(t, envCoordinatorCluster, 3, "kafka-coordinator", "the test stops a node of a private 3-node cluster", 27600)
}

// coordinatorOf returns the node coordinating group, once a broker
// answers for it.
func coordinatorOf(ctx context.Context, t *testing.T, adm *kadm.Client, group string, not int32) int32 {
	t.Helper()
	for {
		r := adm.FindGroupCoordinators(ctx, group)[group]
		if r.Err == nil && r.NodeID != not {
			return r.NodeID
		}
		if ctx.Err() != nil {
			t.Fatalf("no coordinator of group %s but node %d: %v (%v)", group, not, r.Err, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// On Apache Kafka a group's coordinator moves when its broker stops or
// dies: a worker finds the new one, whether the old broker comes back
// (and answers NOT_COORDINATOR) or not. Jobs that end once the move is
// over end as they should, not interrupted for a lost lock. With
// franz-go's cached coordinator for share heartbeats, every job of a
// worker ended lost after the soak's rolling restart, and after a
// coordinator's broker killed for good (member: findCoordinator). About
// two minutes with the cluster's start.
func TestWorkerFollowsAMovedCoordinator(t *testing.T) {
	c, repo, seeds := coordinatorCluster(t)
	// stopped: a controlled shutdown (SIGTERM), the node back before the
	// jobs; killed: SIGKILL (the controller fences the node once its
	// broker session runs out), the node back only after them.
	for _, kill := range []bool{false, true} {
		name := "stopped and back"
		if kill {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) { followMovedCoordinator(t, c, repo, seeds, kill) })
	}
}

// followMovedCoordinator is TestWorkerFollowsAMovedCoordinator with the
// coordinator's node stopped and started again, or killed.
func followMovedCoordinator(t *testing.T, c brokerprobe.Cluster, repo string, seeds []string, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic, group := kafkatest.Name(t, "coord"), kafkatest.Name(t, "coord")
	if _, err := adm.CreateTopic(ctx, 6, 3, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := groupcfg.Set(ctx, cl, group, map[string]string{groupcfg.AutoOffsetReset: "earliest"}); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	out := io.Writer(&logs)
	if testing.Verbose() {
		out = io.MultiWriter(&logs, os.Stderr)
	}
	runs := new(shareqtest.Observer)
	h := handler.Func(func(ctx context.Context, _ *handler.Job) error {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	w, err := worker.New(worker.Brokers(seeds...), worker.Group(group), worker.Handle(topic, h), worker.Concurrency(4),
		worker.Observers(runs), worker.Logger(slog.New(slog.NewTextHandler(out, nil))), worker.ShutdownTimeout(5*time.Second),
		worker.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	kafkatest.Run(t, w.Run)

	produce := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(k)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", k, err)
			}
		}
	}
	waitEnded := func(keys []string, within time.Duration) {
		t.Helper()
		runs.WaitFor(t, within, fmt.Sprintf("%d jobs ended", len(keys)), func(es []shareqtest.Event) bool {
			ended := map[string]bool{}
			for _, e := range es {
				ended[e.Key] = true
			}
			for _, k := range keys {
				if !ended[k] {
					return false
				}
			}
			return true
		})
	}
	keys := func(prefix string, n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return ks
	}
	before := keys("before", 10)
	produce(before...)
	waitEnded(before, 2*time.Minute)

	old := coordinatorOf(ctx, t, adm, group, -1)
	stopped := time.Now()
	if err := c.Stop(ctx, repo, int(old), kill); err != nil {
		t.Fatal(err)
	}
	moved := coordinatorOf(ctx, t, adm, group, old)
	t.Logf("coordinator node %d stopped (SIGKILL %v); node %d took the group after %v", old, kill, moved, time.Since(stopped).Round(time.Millisecond))
	back := time.Now() // the move, from which the jobs below count
	if kill {
		defer func() {
			if err := c.Start(context.Background(), repo, int(old)); err != nil {
				t.Errorf("start node %d again: %v", old, err)
			}
		}()
	} else {
		if err := c.Start(ctx, repo, int(old)); err != nil {
			t.Fatal(err)
		}
		back = time.Now()
		t.Logf("node %d serves again %v after its stop; the coordinator is node %d", old, back.Sub(stopped).Round(time.Millisecond),
			coordinatorOf(ctx, t, adm, group, -1))
	}

	// Jobs for twice the session timeout after the move (the node back,
	// or the group taken by another): each ends; those produced once a
	// few heartbeats had time to be answered must have ended held (a
	// worker asking the old coordinator is never answered, and its jobs
	// end interrupted for the lost lock).
	settle := 2 * worker.SessionTimeoutDefault
	var after []string
	for i := 0; time.Since(back) < 2*settle; i++ {
		k := fmt.Sprintf("after-%d", i)
		produce(k)
		if time.Since(back) > settle {
			after = append(after, k)
		}
		time.Sleep(200 * time.Millisecond)
	}
	produced := time.Now()
	waitEnded(after, 2*time.Minute)
	t.Logf("%d jobs produced from %v to %v after the move; the last ended %v after it was produced", len(after), settle, 2*settle, time.Since(produced).Round(time.Millisecond))
	checked := map[string]bool{}
	for _, k := range after {
		checked[k] = true
	}
	for _, e := range runs.Events() {
		if res := e.Result; checked[e.Key] && (res.Outcome != worker.OutcomeSucceeded || res.Ack != worker.AckAccept) {
			t.Errorf("job %s ended %v/%v (%v), want succeeded/accept; logs:\n%s", e.Key, res.Outcome, res.Ack, res.Err, logs.String())
			return
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "coordinator") {
			t.Log(line)
		}
	}
}
