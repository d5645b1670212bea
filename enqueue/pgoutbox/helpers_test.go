package pgoutbox

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

// waitTimeout bounds every wait on a condition: generous, for a loaded
// CI box.
const waitTimeout = 60 * time.Second

type welcome struct {
	User string `json:"user"`
	N    int    `json:"n"`
}

// bundle is what a test works with: a migrated schema, a cluster and a
// topic on it.
type bundle struct {
	pool    *pgxpool.Pool
	schema  string
	cluster *kafkatest.Cluster
	topic   string
}

func setup(t *testing.T, partitions int32) *bundle {
	t.Helper()
	pool, schema := pgtest.NewPool(t, 16)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	c := kafkatest.New(t)
	return &bundle{pool: pool, schema: schema, cluster: c, topic: c.Topic(t, partitions)}
}

// testRelayOptions keep retries short.
func testRelayOptions(opts ...RelayOption) []RelayOption {
	return append([]RelayOption{RetryBackoff(50*time.Millisecond, 500*time.Millisecond), PollInterval(200 * time.Millisecond)}, opts...)
}

// relay returns a relay on b's pool producing with a fresh client.
func (b *bundle) relay(t *testing.T, opts ...RelayOption) *Relay {
	t.Helper()
	r, err := NewRelay(b.pool, b.cluster.Client(t, enqueue.ProducerOpts()...), testRelayOptions(opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs r until t ends, and fails t if Run returns an error.
func run(t testing.TB, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Relay.Run: %v", err)
		}
	})
}

// inTx runs fn in a transaction of pool and commits it.
func inTx(t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fn(tx)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// enqueueN commits n jobs for topic in one transaction, keyed by
// user (one of keys users), and returns their IDs. Their N values grow
// across the calls of one test.
func enqueueN(t *testing.T, pool *pgxpool.Pool, topic string, n, keys int) []string {
	t.Helper()
	var ids []string
	inTx(t, pool, func(tx pgx.Tx) {
		jobs := make([]enqueue.Job, n)
		for i := range jobs {
			user := string(rune('a' + i%keys))
			jobs[i] = enqueue.NewJob(topic, welcome{User: user, N: int(seq.Add(1))}, enqueue.Key([]byte(user)))
		}
		var err error
		if ids, err = EnqueueManyTx(t.Context(), tx, jobs...); err != nil {
			t.Fatal(err)
		}
	})
	return ids
}

// seq numbers the jobs of enqueueN.
var seq atomic.Int64

// waitFor polls cond until it holds, failing t after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rowCount returns the number of rows in the outbox.
func rowCount(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+Table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// total returns the number of records in topic (the sum of its end
// offsets; the topic is never trimmed in tests).
func total(t *testing.T, c *kafkatest.Cluster, topic string) int64 {
	t.Helper()
	ends, err := c.Admin().ListEndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// checkOrderPerKey fails t unless the records of each key carry
// increasing N values.
func checkOrderPerKey(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	last := map[string]int{}
	for _, r := range recs {
		var w welcome
		if err := json.Unmarshal(r.Value, &w); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[string(r.Key)]; ok && w.N <= prev {
			t.Fatalf("key %s: job %d after job %d; want insertion order per key", r.Key, w.N, prev)
		}
		last[string(r.Key)] = w.N
	}
}
