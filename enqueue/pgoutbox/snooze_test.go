package pgoutbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shareq/shareq/enqueue"
	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/migrations"
	"github.com/shareq/shareq/migrations/pgtest"
	"github.com/shareq/shareq/worker"
)

var _ worker.Snoozer = (*SnoozeStore)(nil)

// snoozeRecord is a snoozed job's copy as the worker makes it: the job ID
// header among others, a header name twice, an empty header value, the
// snooze headers.
func snoozeRecord(topic, id string, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: []byte("customer-7"), Value: []byte(value), Headers: []kgo.RecordHeader{
		{Key: "trace", Value: []byte("t-1")},
		{Key: handler.JobIDHeader, Value: []byte(id)},
		{Key: "trace", Value: []byte("t-2")},
		{Key: "empty", Value: []byte{}},
		{Key: handler.SnoozesHeader, Value: []byte("2")},
		{Key: handler.NotBeforeHeader, Value: []byte("1767225600000")},
	}}
}

// snoozeRows returns the outbox's rows as "job_id value due_at(ms)".
func snoozeRows(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT job_id, convert_from(value, 'UTF8'), (extract(epoch FROM due_at) * 1000)::bigint FROM `+Table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, v string
		var ms int64
		if err := rows.Scan(&id, &v, &ms); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s %d", id, v, ms))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A copy is stored once per key, due when asked, however many Snoozes of
// the key come, one after the other or at once.
func TestSnoozeStoresEachCopyOnce(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 16)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	s := Snoozer(pool)
	if err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check with the tables: %v", err)
	}
	due := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	if err := s.Snooze(t.Context(), snoozeRecord("jobs", "job-1", "first"), due, "job-1@jobs/0/5"); err != nil {
		t.Fatal(err)
	}
	if err := s.Snooze(t.Context(), snoozeRecord("jobs", "job-1", "second"), due.Add(time.Hour), "job-1@jobs/0/5"); err != nil {
		t.Fatalf("second Snooze of a key: %v; want nil", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			errs <- s.Snooze(t.Context(), snoozeRecord("jobs", "job-2", fmt.Sprint("racer-", i)), due, "job-2@jobs/1/9")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Snooze: %v", err)
		}
	}
	got := snoozeRows(t, pool)
	if len(got) != 2 || got[0] != fmt.Sprintf("job-1 first %d", due.UnixMilli()) || !strings.HasPrefix(got[1], "job-2 racer-") {
		t.Fatalf("rows %q; want job-1's first copy due at %d and one copy of job-2", got, due.UnixMilli())
	}
	// A key of the copies is not a key of Unique: an enqueue with the
	// same string is no duplicate.
	var res Result
	inTx(t, pool, func(tx pgx.Tx) {
		var err error
		res, err = EnqueueJobTx(t.Context(), tx, enqueue.NewJob("jobs", "x"), Unique("job-1@jobs/0/5"))
		if err != nil {
			t.Fatal(err)
		}
	})
	if res.Duplicate {
		t.Error("Unique(key) of a snoozed copy's key is a duplicate; want the keys apart")
	}
}

// The relay produces a copy as it was given, and the key stays held
// after the produce: the original's copy written again (its worker died
// before accepting it) stores nothing.
func TestSnoozedCopyIsRelayedAsItIsAndOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	s := Snoozer(b.pool)
	rec := snoozeRecord(b.topic, "job-1", `{"to":"a@example.com"}`)
	if err := s.Snooze(t.Context(), rec, time.Now(), "job-1@x/0/0"); err != nil {
		t.Fatal(err)
	}
	run(t, b.relay(t))
	waitFor(t, "the copy relayed", func() bool { return rowCount(t, b.pool) == 0 })
	got := b.cluster.Consume(t, b.topic, 1)[0]
	if !bytes.Equal(got.Key, rec.Key) || !bytes.Equal(got.Value, rec.Value) || fmt.Sprint(headers(got)) != fmt.Sprint(headers(rec)) {
		t.Fatalf("relayed %q %q %q; want %q %q %q", got.Key, got.Value, headers(got), rec.Key, rec.Value, headers(rec))
	}

	if err := s.Snooze(t.Context(), snoozeRecord(b.topic, "job-1", "again"), time.Now(), "job-1@x/0/0"); err != nil {
		t.Fatalf("Snooze after the relay: %v; want nil", err)
	}
	var left time.Duration
	if err := b.pool.QueryRow(t.Context(), `SELECT extract(epoch FROM expires_at - now()) * interval '1 second' FROM `+UniqueTable+` WHERE key = $1`,
		snoozeKeyPrefix+"job-1@x/0/0").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left < SnoozeKeyPeriod-time.Minute || left > SnoozeKeyPeriod {
		t.Errorf("the key is held %v more; want about SnoozeKeyPeriod (%v) after the produce", left, SnoozeKeyPeriod)
	}
	if n := rowCount(t, b.pool); n != 0 {
		t.Fatalf("%d rows after a second Snooze of a relayed key; want 0", n)
	}
	if n := total(t, b.cluster, b.topic); n != 1 {
		t.Fatalf("%d records; want 1", n)
	}
}

// headers returns r's headers as "key=value" strings, in order.
func headers(r *kgo.Record) []string {
	out := make([]string, len(r.Headers))
	for i, h := range r.Headers {
		out[i] = h.Key + "=" + string(h.Value)
	}
	return out
}

// A Snooze that cannot store its copy says why, and what to do.
func TestSnoozeErrors(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t, 4) // no migrations
	s := Snoozer(pool)
	ok := snoozeRecord("jobs", "job-1", "v")
	noID := snoozeRecord("jobs", "job-1", "v")
	noID.Headers = noID.Headers[:1]
	big := snoozeRecord("jobs", "job-1", strings.Repeat("x", MaxRecordBytes))
	for _, c := range []struct {
		name string
		rec  *kgo.Record
		due  time.Time
		key  string
		want string
	}{
		{"nil record", nil, time.Now(), "k", "nil record"},
		{"no topic", &kgo.Record{Headers: ok.Headers}, time.Now(), "k", "no topic"},
		{"no job ID", noID, time.Now(), "k", "no shareq-job-id header"},
		{"empty key", ok, time.Now(), "", "empty key"},
		{"zero due", ok, time.Time{}, "k", "zero due time"},
		{"too large", big, time.Now(), "k", "over 1000000"},
		{"no tables", ok, time.Now(), "k", "apply migrations (migrations.Up)"},
	} {
		err := s.Snooze(t.Context(), c.rec, c.due, c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
	if err := s.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "run migrations.Up") {
		t.Errorf("Check without the tables: %v; want an error that says to run the migrations", err)
	}
	if err := s.Snooze(t.Context(), big, time.Now(), "k"); !errors.Is(err, enqueue.ErrTooLarge) {
		t.Errorf("too large: %v; want enqueue.ErrTooLarge", err)
	}

	// Postgres out of reach: an error within the caller's deadline.
	cfg, err := pgxpool.ParseConfig("postgres://shareq@127.0.0.1:1/none?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	down, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := Snoozer(down).Snooze(ctx, ok, time.Now(), "k"); err == nil || !strings.Contains(err.Error(), "store the copy of snoozed job job-1") {
		t.Errorf("Postgres down: %v; want the copy's error", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Snoozer(nil) did not panic")
			}
		}()
		Snoozer(nil)
	}()
}
