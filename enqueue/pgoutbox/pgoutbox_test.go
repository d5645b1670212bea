package pgoutbox

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/idempotency/pgstore"
	"github.com/shareq/shareq/internal/cutproxy"
	"github.com/shareq/shareq/internal/kafkatest"
	"github.com/shareq/shareq/internal/logbuf"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
)

func TestRolledBackTransactionEnqueuesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnqueueTx(t.Context(), tx, b.topic, welcome{User: "rolled-back"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	var marker string
	inTx(t, b.pool, func(tx pgx.Tx) {
		if marker, err = EnqueueTx(t.Context(), tx, b.topic, welcome{User: "committed"}); err != nil {
			t.Fatal(err)
		}
	})
	r := b.relay(t)
	run(t, r)
	waitFor(t, "the committed job to be relayed", func() bool { return r.Stats().Produced == 1 })
	recs := b.cluster.Consume(t, b.topic, 1)
	if got := enqueue.RecordID(recs[0]); got != marker {
		t.Fatalf("relayed job %s, want only the committed one %s", got, marker)
	}
	if n := total(t, b.cluster, b.topic); n != 1 {
		t.Fatalf("%d records on the topic, want 1: the rolled-back job must not be relayed", n)
	}
}

func TestCommittedJobsProducedOnceInOrderPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ids := enqueueN(t, b.pool, b.topic, 60, 4)
	// One more in its own transaction, with a chosen ID and a header.
	inTx(t, b.pool, func(tx pgx.Tx) {
		id, err := EnqueueTx(t.Context(), tx, b.topic, welcome{User: "z", N: int(seq.Add(1))}, enqueue.ID("job-z"), enqueue.Key([]byte("z")), enqueue.Header("trace", []byte("t")))
		if err != nil || id != "job-z" {
			t.Fatalf("EnqueueTx = %q, %v", id, err)
		}
	})
	ids = append(ids, "job-z")
	r := b.relay(t, BatchSize(7)) // several rounds
	run(t, r)
	waitFor(t, "every job to be relayed", func() bool { return rowCount(t, b.pool) == 0 })

	recs := b.cluster.Consume(t, b.topic, len(ids))
	if n := total(t, b.cluster, b.topic); n != int64(len(ids)) {
		t.Fatalf("%d records on the topic, want %d: each committed job exactly once", n, len(ids))
	}
	var got []string
	for _, rec := range recs {
		got = append(got, enqueue.RecordID(rec))
		if rec.Timestamp.IsZero() {
			t.Errorf("record without a timestamp")
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("relayed job IDs differ from the enqueued ones")
	}
	checkOrderPerKey(t, recs)
	for _, rec := range recs {
		if enqueue.RecordID(rec) == "job-z" {
			if len(rec.Headers) != 2 || rec.Headers[1].Key != "trace" || string(rec.Headers[1].Value) != "t" {
				t.Errorf("headers of job-z = %v, want the job ID and trace", rec.Headers)
			}
		}
	}
	if s := r.Stats(); s.Produced != uint64(len(ids)) || s.Failures != 0 {
		t.Errorf("stats = %+v, want %d produced, no failures", s, len(ids))
	}
}

func TestNotificationWakesTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	// The relay polls once an hour: only the notification of the commit
	// can make it relay the job within the wait.
	r := b.relay(t, PollInterval(time.Hour))
	run(t, r)
	waitFor(t, "the relay to listen", r.listening.Load)
	enqueueN(t, b.pool, b.topic, 1, 1)
	waitFor(t, "the notified relay to produce the job", func() bool { return r.Stats().Produced == 1 })
}

func TestBadJobsAreRefusedAtEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	tx, err := b.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := EnqueueTx(t.Context(), tx, b.topic, func() {}); !errors.Is(err, enqueue.ErrEncode) {
		t.Errorf("EnqueueTx(func) = %v, want ErrEncode", err)
	}
	big := strings.Repeat("x", MaxRecordBytes)
	if _, err := EnqueueTx(t.Context(), tx, b.topic, big); !errors.Is(err, enqueue.ErrTooLarge) {
		t.Errorf("EnqueueTx(%d bytes) = %v, want ErrTooLarge", len(big), err)
	}
	_, err = EnqueueManyTx(t.Context(), tx, enqueue.NewJob(b.topic, "fine"), enqueue.NewJob(b.topic, make(chan int)))
	if !errors.Is(err, enqueue.ErrEncode) {
		t.Errorf("EnqueueManyTx with one bad job = %v, want ErrEncode", err)
	}
	var n int64
	if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM "+Table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) after refused jobs, want none", n, err)
	}
}

func TestFailingRowDoesNotBlockOtherKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	missing := kafkatest.Name(t, "missing")
	inTx(t, b.pool, func(tx pgx.Tx) {
		if _, err := EnqueueTx(t.Context(), tx, missing, welcome{User: "lost"}, enqueue.ID("job-lost")); err != nil {
			t.Fatal(err)
		}
	})
	ids := enqueueN(t, b.pool, b.topic, 5, 5)
	r := b.relay(t)
	run(t, r)
	waitFor(t, "the jobs behind the failing one to be relayed", func() bool { return r.Stats().Produced == uint64(len(ids)) })
	waitFor(t, "the failure to be recorded", func() bool { return r.Stats().Failures > 0 })
	var attempts int
	var lastErr string
	if err := b.pool.QueryRow(t.Context(), "SELECT attempts, last_error FROM "+Table+" WHERE job_id = 'job-lost'").Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts < 1 || !strings.Contains(lastErr, "the topic does not exist") {
		t.Fatalf("failing row: attempts %d, last_error %q; want a recorded unknown-topic failure", attempts, lastErr)
	}
	bl, err := r.Backlog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bl.Rows != 1 || bl.Failing != 1 || bl.OldestAge <= 0 {
		t.Fatalf("backlog = %+v, want the one failing row", bl)
	}
	if again, err := ReadBacklog(t.Context(), b.pool); err != nil || again.Rows != 1 || again.Failing != 1 {
		t.Fatalf("ReadBacklog = %+v, %v; want the one failing row", again, err)
	}
	failing, err := Failing(t.Context(), b.pool, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(failing) != 1 || failing[0].JobID != "job-lost" || failing[0].Topic != missing || failing[0].Attempts < 1 ||
		!strings.Contains(failing[0].LastError, "the topic does not exist") || failing[0].CreatedAt.IsZero() {
		t.Fatalf("Failing = %+v, want the row of job-lost with its error", failing)
	}
}

// Rows of a key held back by an earlier row waiting for a retry are not
// claimed at all: a full batch of them would otherwise fill every claim
// and starve the rows of every other key until the retry goes through.
func TestRowsBehindARetryDoNotStarveOtherKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	missing := kafkatest.Name(t, "missing")
	inTx(t, b.pool, func(tx pgx.Tx) {
		if _, err := EnqueueTx(t.Context(), tx, missing, welcome{User: "a"}, enqueue.ID("job-lost"), enqueue.Key([]byte("a"))); err != nil {
			t.Fatal(err)
		}
	})
	// The failing row's retry does not come within the test.
	r := b.relay(t, BatchSize(10), RetryBackoff(time.Hour, time.Hour))
	run(t, r)
	waitFor(t, "the failure to be recorded", func() bool { return r.Stats().Failures > 0 })

	// Three batches of rows behind it, then the jobs of another topic.
	behind := enqueueN(t, b.pool, missing, 25, 1)
	ids := enqueueN(t, b.pool, b.topic, 5, 5)
	waitFor(t, "the jobs of the other topic to be relayed", func() bool { return r.Stats().Produced == uint64(len(ids)) })

	var waiting, tried int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*), count(*) FILTER (WHERE attempts > 0) FROM "+Table+" WHERE topic = $1", missing).Scan(&waiting, &tried); err != nil {
		t.Fatal(err)
	}
	if waiting != len(behind)+1 || tried != 1 {
		t.Fatalf("rows of the failing key: %d in the table, %d tried; want all %d, and only the failing one tried", waiting, tried, len(behind)+1)
	}
}

func TestRelayKilledBetweenProduceAndDeleteEffectsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ids := enqueueN(t, b.pool, b.topic, 10, 2)

	// The first relay dies after the broker acknowledged the batch and
	// before it deleted the rows.
	killed := b.relay(t)
	killed.afterProduce = func() error { return errors.New("killed") }
	if err := killed.Run(t.Context()); err != nil {
		t.Fatalf("killed relay: %v", err)
	}
	if n := rowCount(t, b.pool); n != int64(len(ids)) {
		t.Fatalf("%d rows after the kill, want all %d still there", n, len(ids))
	}
	r := b.relay(t)
	run(t, r)
	waitFor(t, "the second relay to relay the rows", func() bool { return rowCount(t, b.pool) == 0 })
	recs := b.cluster.Consume(t, b.topic, 2*len(ids))
	if n := total(t, b.cluster, b.topic); n != int64(2*len(ids)) {
		t.Fatalf("%d records, want every job twice (%d)", n, 2*len(ids))
	}

	// A worker applies each record through the claim of its job ID: the
	// effect happens once per job.
	store, err := pgstore.New(b.pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), "CREATE TABLE effects (job_id text)"); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		job := &handler.Job{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Value: rec.Value}
		for _, h := range rec.Headers {
			job.Headers = append(job.Headers, handler.Header{Key: h.Key, Value: h.Value})
		}
		_, err := store.Claim(t.Context(), job.ID(), func(ctx context.Context) error {
			_, err := pgstore.Tx(ctx).Exec(ctx, "INSERT INTO effects VALUES ($1)", job.ID())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var n, distinct int
	if err := b.pool.QueryRow(t.Context(), "SELECT count(*), count(DISTINCT job_id) FROM effects").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) || distinct != len(ids) {
		t.Fatalf("%d effects (%d distinct), want one per job (%d)", n, distinct, len(ids))
	}
}

func TestTwoRelaysProduceEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	r1, r2 := b.relay(t, BatchSize(5)), b.relay(t, BatchSize(5))
	run(t, r1)
	run(t, r2)
	var ids []string
	for range 10 {
		ids = append(ids, enqueueN(t, b.pool, b.topic, 20, 5)...)
	}
	waitFor(t, "every job to be relayed", func() bool { return rowCount(t, b.pool) == 0 })
	if n := total(t, b.cluster, b.topic); n != int64(len(ids)) {
		t.Fatalf("%d records, want %d: no row twice", n, len(ids))
	}
	recs := b.cluster.Consume(t, b.topic, len(ids))
	seen := map[string]bool{}
	for _, rec := range recs {
		id := enqueue.RecordID(rec)
		if seen[id] {
			t.Fatalf("job %s produced twice", id)
		}
		seen[id] = true
	}
	// Transactions that commit one after the other keep their order
	// per key across the relays.
	checkOrderPerKey(t, recs)
	s1, s2 := r1.Stats(), r2.Stats()
	if s1.Produced+s2.Produced != uint64(len(ids)) {
		t.Fatalf("relays produced %d + %d, want %d", s1.Produced, s2.Produced, len(ids))
	}
}

func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	// The relay reaches Postgres through a proxy the test cuts.
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	px := cutproxy.New(t, u.Host, false)
	u.Host = px.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = b.schema
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs logbuf.Buffer
	r, err := NewRelay(pool, b.cluster.Client(t, enqueue.ProducerOpts()...),
		testRelayOptions(ProduceTimeout(5*time.Second), Logger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	first := enqueueN(t, b.pool, b.topic, 3, 1)
	waitFor(t, "the jobs before the outage", func() bool { return r.Stats().Produced == uint64(len(first)) })

	px.Cut()
	during := enqueueN(t, b.pool, b.topic, 3, 1) // committed directly, not through the proxy
	// Several failed rounds and reconnections: each kind is logged once.
	waitFor(t, "the relay to fail on Postgres repeatedly", func() bool { return r.Stats().DBErrors >= 6 })
	if n := rowCount(t, b.pool); n != int64(len(during)) {
		t.Fatalf("%d rows during the outage, want the %d committed then, waiting", n, len(during))
	}
	px.Restore()
	waitFor(t, "the relay to resume by itself", func() bool { return rowCount(t, b.pool) == 0 })
	waitFor(t, "the relay to log that it is back", func() bool {
		return strings.Contains(logs.String(), "reaches Postgres again") && strings.Contains(logs.String(), "listens again")
	})
	checkLogLines(t, logs.String(), map[string]int{
		"level=WARN": 2, "cannot work on the outbox in Postgres": 1, "no LISTEN connection": 1,
		"reaches Postgres again": 1, "listens again": 1, "relay started": 1,
	})
	recs := b.cluster.Consume(t, b.topic, len(first)+len(during))
	checkOrderPerKey(t, recs)
	if n := total(t, b.cluster, b.topic); n != int64(len(first)+len(during)) {
		t.Fatalf("%d records, want %d", n, len(first)+len(during))
	}
}

func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	// The relay's client bootstraps through a proxy that is down at
	// first: no broker is reachable.
	px := cutproxy.New(t, b.cluster.Seeds[0], true)
	cl := b.cluster.Client(t, append(enqueue.ProducerOpts(), kgo.SeedBrokers(px.Addr()))...)
	var logs logbuf.Buffer
	r, err := NewRelay(b.pool, cl, testRelayOptions(ProduceTimeout(time.Second), Logger(slog.New(slog.NewTextHandler(&logs, nil))))...)
	if err != nil {
		t.Fatal(err)
	}
	ids := enqueueN(t, b.pool, b.topic, 5, 2)
	run(t, r)
	// More failures than rows: several failed rounds, logged once.
	waitFor(t, "produce failures while the broker is unreachable", func() bool { return r.Stats().Failures >= uint64(2*len(ids)) })
	if n := rowCount(t, b.pool); n != int64(len(ids)) {
		t.Fatalf("%d rows during the outage, want all %d waiting", n, len(ids))
	}
	px.Restore()
	waitFor(t, "the relay to resume by itself", func() bool { return rowCount(t, b.pool) == 0 })
	waitFor(t, "the relay to log that it produces again", func() bool { return strings.Contains(logs.String(), "produces again") })
	checkLogLines(t, logs.String(), map[string]int{"level=WARN": 1, "cannot produce jobs": 1, "produces again": 1})
	recs := b.cluster.Consume(t, b.topic, len(ids))
	checkOrderPerKey(t, recs)
	if n := total(t, b.cluster, b.topic); n != int64(len(ids)) {
		t.Fatalf("%d records, want %d", n, len(ids))
	}
}

// checkLogLines fails t unless, for each substring, want[substring] lines
// of logs contain it.
func checkLogLines(t *testing.T, logs string, want map[string]int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	for sub, n := range want {
		got := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				got++
			}
		}
		if got != n {
			t.Errorf("%d log lines with %q, want %d; logs:\n%s", got, sub, n, logs)
		}
	}
}

func TestRelayLogsStartAndStop(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	var logs logbuf.Buffer
	r := b.relay(t, Logger(slog.New(slog.NewTextHandler(&logs, nil))))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	ids := enqueueN(t, b.pool, b.topic, 2, 2)
	waitFor(t, "the jobs to be relayed", func() bool { return r.Stats().Produced == uint64(len(ids)) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkLogLines(t, logs.String(), map[string]int{
		"level=INFO msg=\"pgoutbox: relay started\"":            1,
		"level=INFO msg=\"pgoutbox: relay stopped\" produced=2": 1,
		"level=WARN": 0,
	})
}

func TestRelayLogsToSlogDefaultByDefault(t *testing.T) {
	t.Parallel()
	r, err := NewRelay(&pgxpool.Pool{}, &kgo.Client{})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.logger != slog.Default() {
		t.Fatal("the default logger is not slog.Default()")
	}
}

func TestNewRelayRefusesAStickyPartitioner(t *testing.T) {
	t.Parallel()
	_, err := NewRelay(&pgxpool.Pool{}, kafkatest.New(t).Client(t))
	if !errors.Is(err, enqueue.ErrStickyPartitioner) {
		t.Fatalf("NewRelay(a client with franz-go's default partitioner) = %v, want ErrStickyPartitioner", err)
	}
}

// One relay round of keyless jobs spreads them evenly over the
// partitions.
func TestRelaySpreadsKeylessJobsOverPartitions(t *testing.T) {
	t.Parallel()
	const partitions, perPart = 4, 5
	b := setup(t, partitions)
	inTx(t, b.pool, func(tx pgx.Tx) {
		jobs := make([]enqueue.Job, partitions*perPart)
		for i := range jobs {
			jobs[i] = enqueue.NewJob(b.topic, welcome{N: i})
		}
		if _, err := EnqueueManyTx(t.Context(), tx, jobs...); err != nil {
			t.Fatal(err)
		}
	})
	r := b.relay(t)
	run(t, r)
	recs := b.cluster.Consume(t, b.topic, partitions*perPart)
	got := make([]int, partitions)
	for _, rec := range recs {
		got[rec.Partition]++
	}
	for _, n := range got {
		if n != perPart {
			t.Fatalf("jobs per partition = %v, want %d on each", got, perPart)
		}
	}
}

func TestCheckAndRunWithoutTheTable(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4)
	r, err := NewRelay(pool, kafkatest.New(t).Client(t, enqueue.ProducerOpts()...))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "migrations.Up") {
		t.Fatalf("Check without the table = %v, want an error saying to run the migrations", err)
	}
	if err := r.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "migrations.Up") {
		t.Fatalf("Run without the table = %v, want an error saying to run the migrations", err)
	}
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(t.Context()); err != nil {
		t.Fatalf("Check after migrations.Up = %v, want nil", err)
	}
}

func TestNewRelayValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []RelayOption
	}{
		{"batch size", []RelayOption{BatchSize(0)}},
		{"poll interval", []RelayOption{PollInterval(0)}},
		{"backoff", []RelayOption{RetryBackoff(time.Second, time.Millisecond)}},
		{"logger", []RelayOption{Logger(nil)}},
	}
	pool := &pgxpool.Pool{}
	for _, tt := range tests {
		if _, err := NewRelay(pool, &kgo.Client{}, tt.opts...); err == nil {
			t.Errorf("%s: NewRelay accepted %v", tt.name, tt.opts)
		}
	}
	if _, err := NewRelay(nil, nil); err == nil {
		t.Error("NewRelay(nil, nil) succeeded")
	}
}

// After an outage of any length the relay tries Postgres again within
// 5 s: its waits double from the first backoff and stop growing at 5 s,
// or at the longest backoff when that is shorter.
func TestRelayTriesPostgresAtLeastEveryFiveSeconds(t *testing.T) {
	for _, tc := range []struct {
		first, longest time.Duration
		want           []time.Duration
	}{
		{time.Second, time.Minute, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{50 * time.Millisecond, 150 * time.Millisecond, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond}},
	} {
		c := relayConfig{backoff: tc.first, backoffMax: tc.longest}
		var got []time.Duration
		for d := time.Duration(0); len(got) < len(tc.want); {
			d = c.dbBackoff(d)
			got = append(got, d)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("RetryBackoff(%v, %v): waits %v, want %v", tc.first, tc.longest, got, tc.want)
		}
	}
}
