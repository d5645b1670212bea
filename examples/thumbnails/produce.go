package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
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

// job builds the job to enqueue: the encoded image as the value (sent as
// it is, not as JSON), its metadata in headers, keyed by image so that
// jobs spread over the partitions, with the job ID of the plan.
func (j jobSpec) job(topic string) (enqueue.Job, error) {
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
			return enqueue.Job{}, fmt.Errorf("job %s: %w", j.jobID, err)
		}
	}
	opts := []enqueue.Option{
		enqueue.ID(j.jobID),
		enqueue.Key([]byte(j.imageID)),
		enqueue.Header(HeaderImageID, []byte(j.imageID)),
		enqueue.Header(HeaderContentType, []byte(contentType)),
	}
	if j.demo == "slow" || j.demo == "flaky" {
		opts = append(opts, enqueue.Header(HeaderDemo, []byte(j.demo)))
	}
	return enqueue.NewJob(topic, enqueue.Raw(value), opts...), nil
}

// record is the Kafka record of the job, as the worker receives it.
func (j jobSpec) record(topic string) (*kgo.Record, error) {
	job, err := j.job(topic)
	if err != nil {
		return nil, err
	}
	return job.Record()
}

// produce draws, encodes and enqueues jobs to topic, drawing on all CPUs,
// and returns how many the broker acknowledged. It returns the first
// error; every job it started has been acknowledged or failed by then.
func produce(ctx context.Context, p enqueue.Producer, topic string, jobs []jobSpec) (int, error) {
	q, err := enqueue.New(p)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		acked atomic.Int64
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				job, err := jobs[i].job(topic)
				if err != nil {
					cancel(err)
					return
				}
				// Enqueue returns once the broker has acknowledged the
				// job; the next image is drawn meanwhile by the other
				// goroutines.
				if _, err := q.EnqueueMany(ctx, job); err != nil {
					cancel(fmt.Errorf("produce: %w", err))
					return
				}
				acked.Add(1)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return int(acked.Load()), err
	}
	return int(acked.Load()), nil
}
