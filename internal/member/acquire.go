package member

// The acquire mode of a fetch (KIP-1206, ShareFetch v2).
//
// record_limit (ShareAcquireMode 1) acquires at most MaxRecords records,
// splitting producer batches; batch_optimized (0) acquires whole producer
// batches and may go past MaxRecords to finish one (docs/architecture.md, fact 15:
// MaxRecords 1 acquired a batch of 196 records on Kafka; kfake gives
// exactly MaxRecords in both modes).
//
// A fetch is batch_optimized when the credit it asks for covers the
// largest producer batch seen in the latest response of every partition it
// fetches: then a whole batch is no more than the worker asked for, and
// the broker keeps whole batches rather than per-record state. Otherwise
// it is record_limit: with less credit than a batch, a whole batch would
// put records in hand that no handler is free for, and a slow job's
// neighbours would wait behind it (the head-of-line result of
// BENCHMARKS.md section 1 needs exactly the records there are slots for).
// A partition whose batches grow past what was seen can bring at most
// one producer batch more than asked for (a partition not seen yet is
// fetched record_limit, so a fetch that names one is too); the member
// delivers it anyway (a release would cost a delivery) and the credit
// goes below 0 until the jobs ending repay it (handleFetch).
//
// The credit is the worker's: Stats.WholeBatches tells it the credit that
// covers a batch, and a worker whose jobs are short enough grants credit
// that many records at a time (worker/executor_prefetch.go, prefetchFor),
// so that its fetches are batch_optimized even when a round trip of jobs
// is much less than a batch.
//
// Measured (Kafka 4.4.0 single node, lock 5 s, and kfake; 2 cores shared
// with other work, so rates move up to 2× between runs):
//
//   - TestBatchOptimizedOnceTheCreditCoversABatch: with 20 records left
//     of a producer batch of 40, a batch_optimized fetch for 50 delivered
//     60 on Kafka (the rest of that batch and the next one whole: the
//     last batch is finished past MaxRecords), exactly 50 on kfake.
//   - BenchmarkMemberAcquireMode (credit 1,000, producer batches of
//     about 130 records, three rounds): record_limit only ran 61,822–
//     66,270 records/s on Kafka; the member's choice 64,578–132,213
//     (median 93,147), with 175–178 of 186–189 fetches batch_optimized,
//     the same number of fetches, and 7.5–8.4 % of the records delivered
//     past the credit. On kfake the modes do not differ.
//   - BenchmarkNoopRequests (the worker, BENCHMARKS.md section 2): on
//     Kafka a record_limit fetch costs about 2 ms plus 6–12 µs a record.
const (
	acquireBatchOptimized int8 = 0
	acquireRecordLimit    int8 = 1
)

// recordLimitOnly makes every fetch record_limit: the baseline of
// BenchmarkMemberAcquireMode, set only before any member runs.
var recordLimitOnly = false

// acquireMode is the acquire mode of the session's next fetch, which asks
// for share records.
func (m *Member) acquireMode(s *session, share int) int8 {
	want := m.meta.want[s.broker]
	if len(want) == 0 || recordLimitOnly {
		return acquireRecordLimit
	}
	if s.modePlan == 0 || s.modePlan != m.meta.plan || s.modeDecoded != m.dec.changes {
		// The wanted partitions or their batch sizes changed: look at
		// each once, rather than at every fetch.
		s.modePlan, s.modeDecoded = m.meta.plan, m.dec.changes
		if n, all := m.dec.largestBatch(want); all {
			s.maxBatch = n
		} else {
			s.maxBatch = -1
		}
	}
	if s.maxBatch < 0 || s.maxBatch > share {
		return acquireRecordLimit
	}
	m.st.BatchFetches++
	return acquireBatchOptimized
}

// wholeBatches is the credit at which the share of every session that
// fetches covers the largest producer batch of the partitions it fetches
// (Stats.WholeBatches): the largest batch of any wanted partition, as
// seen in its latest response, times the sessions that fetch; 0 before a
// batch was seen. It looks at the partitions again only when they or
// their batch sizes changed, since publish calls it after every step.
func (m *Member) wholeBatches() int {
	if m.whole.plan == m.meta.plan && m.whole.decoded == m.dec.changes && m.whole.fetchers == m.fetchers {
		return m.whole.credit
	}
	m.whole.plan, m.whole.decoded, m.whole.fetchers = m.meta.plan, m.dec.changes, m.fetchers
	largest := 0
	for _, ps := range m.meta.want {
		n, _ := m.dec.largestBatch(ps)
		largest = max(largest, n)
	}
	m.whole.credit = largest * max(1, m.fetchers)
	return m.whole.credit
}

// largestBatch is the most records of a producer batch among ps, as their
// latest responses showed, and whether every one of ps was seen.
func (d *decoder) largestBatch(ps []tp) (largest int, all bool) {
	all = true
	for _, p := range ps {
		n, seen := d.batchSize[p]
		all = all && seen
		largest = max(largest, n)
	}
	return largest, all
}
