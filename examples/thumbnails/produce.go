package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/handler"
)

// jobSpec is one job the producer writes.
type jobSpec struct {
	seed    uint64
	maxSide int    // the longest side the image may have
	jobID   string // the shareq-job-id header: stable across producer retries
	imageID string
	demo    string // "", "slow", "flaky" or "corrupt"
}

// planJobs lays out n jobs for the run named run, with images of at most
// maxSide pixels a side. Image i is drawn from seed i, so every run makes
// the same images; the job IDs carry the run's name, so jobs of two runs
// are two jobs (an idempotency store that outlives a run, such as
// Postgres, would otherwise skip the second run's jobs as already done).
//
// Among them: one corrupt image (garbage bytes), which is parked in the
// DLQ with reason "decode"; one flaky job, which fails its first
// delivery and succeeds on the second; and a few slow jobs, about one in
// sixty, spread over the run.
func planJobs(run string, n, maxSide int) []jobSpec {
	jobs := make([]jobSpec, n)
	for i := range jobs {
		id := fmt.Sprintf("img-%04d", i)
		jobs[i] = jobSpec{seed: uint64(i), maxSide: maxSide, jobID: run + "/" + id, imageID: id}
	}
	mark := func(i int, demo string) {
		for k := range n { // the next free index from i
			j := (i + k) % n
			if jobs[j].demo == "" {
				jobs[j].demo = demo
				return
			}
		}
	}
	if n == 0 {
		return jobs
	}
	mark(min(7, n-1), "corrupt") // early, so the demo shows it soon
	if n >= 3 {
		mark(n*2/3, "flaky")
	}
	if n >= 4 {
		slow := max(1, n/60)
		for k := range slow {
			mark(k*n/slow+n/(2*slow), "slow")
		}
	}
	return jobs
}

// record builds the Kafka record of a job: the encoded image as the value,
// its metadata in headers, keyed by image so that jobs spread over the
// partitions.
func (j jobSpec) record(topic string) (*kgo.Record, error) {
	var value []byte
	contentType := "image/png"
	if j.demo == "corrupt" {
		// A PNG signature followed by noise: it looks like a PNG to
		// anything that sniffs the first bytes, and fails to decode.
		r := rand.New(rand.NewPCG(j.seed, 1))
		value = append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 4096)...)
		for i := 8; i < len(value); i++ {
			value[i] = byte(r.Uint32())
		}
	} else {
		img, p := genImage(j.seed, j.maxSide)
		var err error
		if value, contentType, err = encodeImage(img, p); err != nil {
			return nil, fmt.Errorf("job %s: %w", j.jobID, err)
		}
	}
	rec := &kgo.Record{
		Topic: topic,
		Key:   []byte(j.imageID),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: handler.JobIDHeader, Value: []byte(j.jobID)},
			{Key: HeaderImageID, Value: []byte(j.imageID)},
			{Key: HeaderContentType, Value: []byte(contentType)},
		},
	}
	if j.demo == "slow" || j.demo == "flaky" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderDemo, Value: []byte(j.demo)})
	}
	return rec, nil
}

// produce draws, encodes and produces jobs to topic, drawing on all CPUs,
// and returns how many the broker acknowledged. It returns the first error;
// every record it started has been acknowledged or failed by then.
func produce(ctx context.Context, cl *kgo.Client, topic string, jobs []jobSpec) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		acked atomic.Int64
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	fail := func(err error) { cancel(err) }
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				rec, err := jobs[i].record(topic)
				if err != nil {
					fail(err)
					return
				}
				// Produce is asynchronous: the callback runs when the
				// broker has acknowledged the record (or the client
				// gave up on it).
				cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
					if err != nil {
						fail(fmt.Errorf("produce job %s: %w", jobs[i].jobID, err))
						return
					}
					acked.Add(1)
				})
			}
		})
	}
	wg.Wait()
	// Wait for every record in flight; with ctx cancelled by a failure,
	// Flush returns at once and the callbacks report the records as failed.
	if err := cl.Flush(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return int(acked.Load()), fmt.Errorf("produce: flush: %w", err)
	}
	if err := context.Cause(ctx); err != nil {
		return int(acked.Load()), err
	}
	return int(acked.Load()), nil
}
