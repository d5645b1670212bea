package pgoutbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shareq/shareq/handler"
)

// TestFrozenRelayReleasesItsRows freezes a relay between the broker's
// acknowledgement of its batch and its delete, as a SIGSTOP or a VM pause
// would, and checks that Postgres ends its claim after the lease
// (ProduceTimeout + ClaimSlack) so that another relay produces the rows;
// and that the frozen relay, woken, corrupts nothing: its delete fails on
// its ended session, the rows are produced twice with their job IDs (the
// worker's claim absorbs the second record) and deleted once.
func TestFrozenRelayReleasesItsRows(t *testing.T) {
	b := setup(t, 3)
	ids := enqueueN(t, b.pool, b.topic, 10, 2)

	const produceTimeout, slack = 2 * time.Second, 500 * time.Millisecond
	frozen := b.relay(t, ProduceTimeout(produceTimeout))
	frozen.claimSlack = slack
	inside, release := make(chan struct{}), make(chan struct{})
	var once, woken sync.Once
	wake := func() { woken.Do(func() { close(release) }) }
	frozen.afterProduce = func() error {
		once.Do(func() {
			close(inside)
			<-release // frozen, holding the claimed rows idle in their transaction
		})
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The lease runs from the claim, which comes after this (the produce
	// in between may take a while on a real broker).
	started := time.Now()
	go func() { done <- frozen.Run(ctx) }()
	defer func() {
		wake() // on a failure too: Run returns only once the round does
		cancel()
		if err := <-done; err != nil {
			t.Errorf("frozen relay's Run: %v", err)
		}
	}()
	select {
	case <-inside:
	case <-time.After(waitTimeout):
		t.Fatal("the first relay never produced its batch")
	}

	other := b.relay(t, ProduceTimeout(produceTimeout))
	run(t, other)
	// Its stats count a batch once its delete committed: wait for both.
	waitFor(t, "the other relay to produce the frozen relay's rows", func() bool {
		return rowCount(t, b.pool) == 0 && other.Stats().Produced >= uint64(len(ids))
	})
	took := time.Since(started)
	if lease := produceTimeout + slack; took < lease {
		t.Fatalf("the rows were taken over %v after the relay started, before the lease of %v from its claim ran out", took, lease)
	}
	if s := other.Stats(); s.Produced != uint64(len(ids)) {
		t.Fatalf("the other relay produced %d rows, want the %d the frozen one held", s.Produced, len(ids))
	}
	t.Logf("rows taken over %v after the frozen relay started (lease %v from its claim)", took.Round(time.Millisecond), produceTimeout+slack)

	// Woken, the frozen relay finds its session ended: its delete fails
	// and is counted, and nothing it held is deleted twice or left over.
	wake()
	waitFor(t, "the woken relay to count its failed delete", func() bool { return frozen.Stats().DBErrors > 0 })
	if s := frozen.Stats(); s.Produced != 0 {
		t.Fatalf("the woken relay counts %d rows produced and deleted, want 0 (another relay deleted them)", s.Produced)
	}
	if n := total(t, b.cluster, b.topic); n != int64(2*len(ids)) {
		t.Fatalf("%d records, want each of the %d jobs twice (once per relay)", n, len(ids))
	}
	recs := b.cluster.Consume(t, b.topic, 2*len(ids))
	seen := map[string]int{}
	for _, r := range recs {
		for _, h := range r.Headers {
			if h.Key == handler.JobIDHeader {
				seen[string(h.Value)]++
			}
		}
	}
	for _, id := range ids {
		if seen[id] != 2 {
			t.Fatalf("job %s in %d records, want 2 with its job ID", id, seen[id])
		}
	}
	var produced int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+ProducedTable+" WHERE job_id = ANY($1)", ids).Scan(&produced); err != nil {
		t.Fatal(err)
	}
	if produced != len(ids) || rowCount(t, b.pool) != 0 {
		t.Fatalf("%d produced IDs recorded, %d rows left; want %d and 0", produced, rowCount(t, b.pool), len(ids))
	}
	// The woken relay works on: a new row is produced.
	enqueueN(t, b.pool, b.topic, 1, 1)
	waitFor(t, "the relays to produce a new row", func() bool { return rowCount(t, b.pool) == 0 })
}
