package worker

// batchSizer is a handler that runs jobs in batches (handler.Batcher).
type batchSizer interface{ BatchSize() int }

// checkBatches refuses a batch handler whose batch cannot fill: each job
// of a batch holds a handler slot of its own while it waits for the
// others, so a batch larger than Concurrency would only ever run at its
// wait bound, partly filled.
func (c *config) checkBatches(bad func(format string, args ...any)) {
	for _, r := range c.routes {
		b, ok := r.h.(batchSizer)
		if ok && b.BatchSize() > c.concurrency {
			bad("Handle(%q): a batch of %d jobs needs Concurrency(%d) or more: each job of a batch holds its own handler slot while it waits for the others", r.topic, b.BatchSize(), b.BatchSize())
		}
	}
}
