package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/worker"
)

// A worker is one member of its share group whatever its Concurrency: three
// workers with default options fit a group capped at three members
// (group.share.max.size, set on kfake; the real test broker keeps Kafka's
// 200, so there it shows one member each), each holds one member, and every
// job is done without a GROUP_MAX_SIZE_REACHED.
func TestThreeWorkersFitAGroupOfThree(t *testing.T) {
	t.Parallel()
	b := setup(t, 6, kafkatest.BrokerConfig("group.share.max.size", "3"))
	const jobs = 300
	keys := make([]string, jobs)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%03d", i)
	}
	b.produce(t, keys...)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var done doneSet
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		done.add(job.Offset, job.Partition)
		return nil
	})
	for range 3 {
		b.start(t, h, worker.Logger(logger))
	}
	b.obs.WaitFor(t, 60*time.Second, "every job accepted", func(fs []finished) bool { return done.len() == jobs })
	b.waitMembers(t, 3)
	for _, bad := range []string{"GROUP_MAX_SIZE_REACHED", "GroupMaxSizeReached"} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the workers logged %s:\n%s", bad, lastLines(logs.String(), 10))
		}
	}
}

// Ten workers of Concurrency 50 in one group: ten members, every job done,
// and each worker's Kafka connections are its brokers' and a few more,
// whatever its Concurrency.
func TestTenWorkersAreTenMembers(t *testing.T) {
	t.Parallel()
	b := setup(t, 6)
	const jobs = 2000
	keys := make([]string, jobs)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%04d", i)
	}
	b.produce(t, keys...)
	var done doneSet
	h := handler.Func(func(_ context.Context, job *handler.Job) error {
		time.Sleep(time.Millisecond)
		done.add(job.Offset, job.Partition)
		return nil
	})
	conns := make([]*connCounter, 10)
	for i := range conns {
		conns[i] = &connCounter{}
		b.start(t, h, worker.Concurrency(50), worker.ClientOpts(kgo.WithHooks(conns[i])))
	}
	b.obs.WaitFor(t, 120*time.Second, "every job accepted", func(fs []finished) bool { return done.len() == jobs })
	b.waitMembers(t, 10)
	brokers := len(b.c.Seeds)
	if b.c.Kind == "kfake" {
		brokers = 1
	}
	for i, c := range conns {
		// The member's client: a seed connection and, per broker, one for
		// share fetches and one for the rest; the topic watch's client
		// adds as many again, and the control watch's reader (package
		// control) a seed connection and two to the control topic's
		// leader, one for its offsets and one for its long-poll fetch.
		if open, most := c.counts(); most > 4*brokers+5 {
			t.Errorf("worker %d: %d connections open at once (%d now), want at most %d for %d broker(s)", i, most, open, 4*brokers+5, brokers)
		}
	}
	_, most := conns[0].counts()
	t.Logf("%s: 10 workers × Concurrency 50, %d jobs; worker 0 had at most %d connections open", b.c.Kind, jobs, most)
}

// waitMembers waits until the bundle's group has exactly n members.
func (b *bundle) waitMembers(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := -1
	for ctx.Err() == nil {
		if ds, err := b.c.Admin().DescribeShareGroups(ctx, b.group); err == nil {
			if got = len(ds[b.group].Members); got == n {
				return
			}
		}
		time.Sleep(100 * time.Millisecond) // polling the admin API: no event to wait on
	}
	t.Fatalf("group %s has %d members, want %d", b.group, got, n)
}

// doneSet is the set of records whose job ran; safe for concurrent use.
type doneSet struct {
	mu   sync.Mutex
	seen map[[2]int64]bool
}

func (d *doneSet) add(offset int64, partition int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[[2]int64]bool{}
	}
	d.seen[[2]int64{int64(partition), offset}] = true
}

func (d *doneSet) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.seen)
}

// connCounter is a kgo hook that counts the connections open at once.
type connCounter struct {
	open, most atomic.Int64
}

func (c *connCounter) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		return
	}
	n := c.open.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *connCounter) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { c.open.Add(-1) }

func (c *connCounter) counts() (open, most int) { return int(c.open.Load()), int(c.most.Load()) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
