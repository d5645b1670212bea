package worker_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/shareqtest"
	"github.com/shareq/shareq/worker"
)

// stallReports is a worker.StallObserver recording what the worker
// reported, in order.
type stallReports struct {
	worker.NopObserver
	mu      sync.Mutex
	stalled []bool
}

func (s *stallReports) PartitionStalled(_ string, _ int32, stalled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = append(s.stalled, stalled)
}

func (s *stallReports) get() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.stalled...)
}

// A job that holds the record at a partition's start offset while the
// records after it are done stops the partition once the share
// partition's in-flight limit (share.partition.max.record.locks) is
// reached: the broker acquires no more records of it, though they wait.
// The worker reports the partition stalled, with no job of it left to
// start, and reports it moving again once the job ends; every job then
// runs. The same signs (a start offset that does not move, the records
// from it reaching the limit, fetches coming back empty) are what a
// partition whose share state the broker lost shows (RELIABILITY.md, "A
// partition the broker stops serving").
func TestStalledPartitionIsReportedAndMovesAgain(t *testing.T) {
	t.Parallel()
	// kfake keeps the limit per broker, Kafka 4.3+ per group too (the
	// broker's lowest allowed is 100); Kafka 4.2 has no group config for
	// it, so the test works with the broker's default there.
	limit := 100
	b := setup(t, 1, kafkatest.BrokerConfig("group.share.partition.max.record.locks", strconv.Itoa(limit)))
	switch {
	case b.c.Kind == "kfake":
	case b.c.Version == "4.2":
		limit = 2000
	default:
		b.group = b.c.GroupWith(t, map[string]string{"share.partition.max.record.locks": strconv.Itoa(limit), "share.auto.offset.reset": "earliest"})
	}
	jobs := limit + 50
	keys := []string{"hold"}
	for i := 1; i < jobs; i++ {
		keys = append(keys, fmt.Sprintf("job-%d", i))
	}
	b.produce(t, keys...)
	release := make(chan struct{})
	h := holding(release)
	reports := &stallReports{}
	b.start(t, h, worker.Observers(reports), worker.Concurrency(8), worker.StallCheckTimes(2*time.Second, 200*time.Millisecond))
	// kfake acquires up to the limit (99 jobs run beside the held one);
	// Kafka 4.4.0 checks the limit before a fetch and acquired all 150 in
	// one. Then as many jobs again: past the limit on both, they wait.
	b.obs.WaitFor(t, 60*time.Second, fmt.Sprintf("%d jobs accepted", limit-1), func([]shareqtest.Event) bool {
		return b.obs.Count(worker.AckAccept) >= limit-1
	})
	var more []string
	for i := range jobs {
		more = append(more, fmt.Sprintf("more-%d", i))
	}
	b.produce(t, more...)

	deadline := time.Now().Add(90 * time.Second)
	for len(reports.get()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported within 90 s; %d jobs accepted", b.obs.Count(worker.AckAccept))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := reports.get(); !got[0] {
		t.Fatalf("first report %v, want stalled", got)
	}
	done := b.obs.Count(worker.AckAccept)
	t.Logf("%s: stall reported with %d of %d jobs done and the job at the start offset running", b.c.Kind, done, 2*jobs)
	if done >= 2*jobs-1 {
		t.Fatalf("%d jobs done when the stall was reported: want the records past the limit waiting", done)
	}
	close(release)
	b.obs.WaitFor(t, 60*time.Second, fmt.Sprintf("%d jobs accepted", 2*jobs), func([]shareqtest.Event) bool {
		return b.obs.Count(worker.AckAccept) >= 2*jobs
	})
	for {
		got := reports.get()
		if len(got) >= 2 {
			if got[1] || len(got) > 2 {
				t.Fatalf("reports %v, want stalled then moving again", got)
			}
			break
		}
		if time.Now().After(deadline.Add(60 * time.Second)) {
			t.Fatalf("no report of the partition moving again; reports %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
