package member

// The acquire mode of a fetch (KIP-1206, ShareFetch v2).
//
// record_limit (ShareAcquireMode 1) acquires at most MaxRecords records,
// splitting producer batches; batch_optimized (0) acquires whole producer
// batches and may go past MaxRecords to finish one (ENGINE.md fact 15:
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
// A partition not seen yet, or whose batches grow past what was seen,
// can bring at most one producer batch more than asked for; the member
// delivers it anyway (a release would cost a delivery) and the credit
// goes below 0 until the jobs ending repay it (handleFetch).
//
// What the modes cost on the broker is measured in BENCHMARKS.md
// ("What limits the worker").
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
	for _, p := range want {
		n, seen := m.dec.batchSize[p]
		if !seen || n > share {
			return acquireRecordLimit
		}
	}
	m.st.BatchFetches++
	return acquireBatchOptimized
}
