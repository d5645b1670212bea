package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

// skipReports is a worker.GrowthObserver recording what the worker found.
type skipReports struct {
	worker.NopObserver
	mu      sync.Mutex
	records map[int32]int64 // partition → records reported skipped
}

func (s *skipReports) PartitionSkipped(_ string, p int32, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[p] += n
}

func (s *skipReports) get(p int32) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.records[p]
	return n, ok
}

// Partitions added to a topic while a worker runs (KAFKA-20742), in a
// group with Kafka's default share.auto.offset.reset=latest: jobs are
// written to every partition, the three new ones included, right after the
// partitions are added, before the group can have started the new ones.
// On Kafka 4.4 and kfake every job runs. On Kafka before 4.4 the group
// starts the new partitions at their latest offset, so their jobs are
// never delivered: the worker must report each partition it skipped with
// as many records as it skipped (checked against what did run).
func TestPartitionsAddedMidRun(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	b.group = b.c.GroupWith(t, nil)
	const perPartition = 10
	reports := &skipReports{records: map[int32]int64{}}
	var mu sync.Mutex
	ran := map[string]map[int32]int{} // batch tag → partition → jobs run
	h := handler.Func(func(_ context.Context, j *handler.Job) error {
		var p int32
		var tag string
		if _, err := fmt.Sscanf(string(j.Key), "%1s%d-", &tag, &p); err != nil {
			return handler.Permanent(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if ran[tag] == nil {
			ran[tag] = map[int32]int{}
		}
		ran[tag][p]++
		return nil
	})
	runs := func(tag string, p int32) int {
		mu.Lock()
		defer mu.Unlock()
		return ran[tag][p]
	}
	if b.c.Kind == "kfake" {
		// kfake starts added partitions at share.auto.offset.reset like
		// Kafka before 4.4 but reports 4.4's metadata.version: make it
		// say 4.3's, so the worker checks as it does on 4.3.
		pretendMetadataVersion(t, b, 30)
	}
	b.start(t, h, worker.Observers(reports))

	produce := func(tag string, from, to int32, n int) {
		t.Helper()
		var recs []*kgo.Record
		for p := from; p < to; p++ {
			for i := range n {
				k := fmt.Sprintf("%s%d-%d", tag, p, i)
				recs = append(recs, &kgo.Record{Topic: b.topic, Partition: p, Key: []byte(k), Value: []byte(k)})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A new client per call: its first metadata has every partition.
		cl := b.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		defer cl.Close()
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	// steady writes one record to each of the partitions from..to every
	// 300 ms, from WaitFor's condition, until it holds.
	var last time.Time
	steady := func(tag string, from, to int32) {
		if time.Since(last) >= 300*time.Millisecond {
			produce(tag, from, to, 1)
			last = time.Now()
		}
	}
	// A group at latest gets only what is written after it started a
	// partition: write to the first three until a job of each has run.
	b.obs.WaitFor(t, 30*time.Second, "a job of each of the first 3 partitions", func([]finished) bool {
		steady("w", 0, 3)
		return runs("w", 0) > 0 && runs("w", 1) > 0 && runs("w", 2) > 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.c.Admin().CreatePartitions(ctx, 3, b.topic); err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	added := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			t.Fatal("the metadata never showed 6 partitions")
		}
		mctx, mcancel := context.WithTimeout(ctx, 5*time.Second)
		md, err := b.c.Admin().Metadata(mctx, b.topic)
		mcancel()
		if err == nil && len(md.Topics[b.topic].Partitions) == 6 {
			break
		}
	}
	produce("b", 0, 6, perPartition)

	// Then records keep coming to the new partitions ("c"): the group
	// writes a start offset for a partition only once it is done with a
	// record there, and the worker needs one to see what was skipped.
	fixed := b.c.Version == "4.4"   // and kfake behaves like 4.3 here
	settled := func(p int32) bool { // every "b" job of p ran, or the worker reported the ones that did not
		n := runs("b", p)
		if n == perPartition {
			return true
		}
		skipped, ok := reports.get(p)
		return !fixed && ok && int64(n)+skipped >= perPartition
	}
	b.obs.WaitFor(t, 45*time.Second, "every job run, or reported skipped", func([]finished) bool {
		steady("c", 3, 6)
		for p := range int32(6) {
			if !settled(p) {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	var got []string
	lost := 0
	for p := range int32(6) {
		skipped, _ := reports.get(p)
		got = append(got, fmt.Sprintf("p%d ran %d reported-skipped %d", p, ran["b"][p], skipped))
		if p >= 3 {
			lost += perPartition - ran["b"][p]
		}
	}
	t.Logf("broker %s: after adding partitions 3-5 (%v ago): %s; lost %d of %d jobs written to the new partitions",
		b.c.Version, time.Since(added).Round(time.Millisecond), strings.Join(got, ", "), lost, 3*perPartition)
	if fixed && lost > 0 {
		t.Fatalf("%d jobs written to the new partitions never ran", lost)
	}
	for p := range int32(3) {
		if ran["b"][p] != perPartition {
			t.Errorf("partition %d: %d jobs ran, want %d", p, ran["b"][p], perPartition)
		}
	}
}

// pretendMetadataVersion makes b's kfake cluster answer ApiVersions with
// max as the highest metadata.version it supports: the release line the
// worker reads from it.
func pretendMetadataVersion(t *testing.T, b *bundle, max int16) {
	t.Helper()
	cl := b.c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	real, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	features := slices.Clone(real.SupportedFeatures)
	for i := range features {
		if features[i].Name == "metadata.version" {
			features[i].MaxVersion = max
		}
	}
	fake := b.c.Fake()
	fake.ControlKey(kmsg.ApiVersions.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.Version = req.GetVersion()
		resp.ApiKeys = slices.Clone(real.ApiKeys)
		resp.SupportedFeatures = features
		resp.FinalizedFeatures = real.FinalizedFeatures
		resp.FinalizedFeaturesEpoch = real.FinalizedFeaturesEpoch
		return resp, nil, true
	})
}
