package pgjoblog

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// insertRun writes a run that ended at ended straight into the table
// (the log stamps its own end times).
func insertRun(t testing.TB, pool *pgxpool.Pool, topic, outcome string, offset int64, ended time.Time) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO `+table+` (job_id, topic, partition, "offset", delivery_count, outcome, ack, started_at, ended_at, duration_us)
		VALUES ($1, $2, 0, $3, 1, $4, 'accept', $5, $5, 0)`, topic+"/"+outcome, topic, offset, outcome, ended)
	if err != nil {
		t.Fatal(err)
	}
}

// withPartitions returns a migrated pool whose job log table has the
// partitions of yesterday to the next days (what Run keeps).
func withPartitions(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool := migrated(t)
	l, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.keepPartitions(t.Context(), time.Now()); err != nil {
		t.Fatal(err)
	}
	return pool
}

// CountOutcomes counts a topic's runs per step and outcome, from the
// range's start (included) to its end (excluded), the steps aligned on
// the start; other topics, and runs outside the range, are left out.
func TestCountOutcomes(t *testing.T) {
	t.Parallel()
	pool := withPartitions(t)
	from := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	at := func(d time.Duration) time.Time { return from.Add(d) }
	var off int64
	add := func(topic, outcome string, ended time.Time) {
		off++
		insertRun(t, pool, topic, outcome, off, ended)
	}
	add("t", "succeeded", at(0))              // the start: in
	add("t", "succeeded", at(59*time.Second)) // the first step
	add("t", "parked", at(30*time.Second))    // the first step
	add("t", "succeeded", at(time.Minute))    // the second step
	add("t", "retried", at(9*time.Minute+59*time.Second))
	add("t", "succeeded", at(10*time.Minute))     // the end: out
	add("t", "succeeded", at(-time.Second))       // before: out
	add("other", "succeeded", at(30*time.Second)) // another topic
	got, err := CountOutcomes(t.Context(), pool, "t", from, at(10*time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []OutcomeCount{
		{from, "parked", 1}, {from, "succeeded", 2}, {at(time.Minute), "succeeded", 1}, {at(9 * time.Minute), "retried", 1},
	}
	if !slices.EqualFunc(got, want, func(a, b OutcomeCount) bool {
		return a.Start.Equal(b.Start) && a.Outcome == b.Outcome && a.Runs == b.Runs
	}) {
		t.Errorf("counts\n got %v\nwant %v", got, want)
	}
	none, err := CountOutcomes(t.Context(), pool, "nothing", from, at(10*time.Minute), time.Minute)
	if err != nil || len(none) != 0 {
		t.Errorf("a topic without runs: %v, %v", none, err)
	}
}

func TestCountOutcomesRefusesBadRanges(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, c := range map[string]struct {
		from, to time.Time
		step     time.Duration
	}{
		"step":     {now, now.Add(time.Hour), 1500 * time.Millisecond},
		"no step":  {now, now.Add(time.Hour), 0},
		"range":    {now, now, time.Minute},
		"too many": {now, now.Add(MaxCountSteps*time.Second + time.Second), time.Second},
	} {
		if _, err := CountOutcomes(context.Background(), nil, "t", c.from, c.to, c.step); err == nil || !strings.Contains(err.Error(), "give") {
			t.Errorf("%s: err %v, want one saying what to give", name, err)
		}
	}
}

// BenchmarkCountOutcomes counts the runs of one topic of four, per
// minute over the last hour and per 10 minutes over the last day, in a
// job log of 1,000,000 runs over the last day (the console's topic
// chart's query). Filling the table takes about 10 s.
//
//	SHAREQ_TEST_DATABASE_URL=... go test ./joblog/pgjoblog -run '^$' -bench CountOutcomes -benchtime 20x
func BenchmarkCountOutcomes(b *testing.B) {
	pool := withPartitions(b)
	_, err := pool.Exec(b.Context(), `INSERT INTO `+table+` (job_id, topic, partition, "offset", delivery_count, outcome, ack, started_at, ended_at, duration_us)
SELECT 'j' || i, 'topic-' || (i % 4), i % 6, i, 1,
    (ARRAY['succeeded','succeeded','succeeded','succeeded','succeeded','succeeded','retried','parked','discarded','succeeded'])[1 + i % 10],
    'accept', now() - i * interval '86 milliseconds', now() - i * interval '86 milliseconds', 1000
FROM generate_series(1, 1000000) i`)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(b.Context(), `VACUUM ANALYZE `+table); err != nil {
		b.Fatal(err)
	}
	for _, r := range []struct {
		name       string
		span, step time.Duration
	}{{"hour", time.Hour, time.Minute}, {"day", 24 * time.Hour, 10 * time.Minute}} {
		b.Run(r.name, func(b *testing.B) {
			var steps int
			for b.Loop() {
				to := time.Now().Truncate(r.step).Add(r.step)
				counts, err := CountOutcomes(b.Context(), pool, "topic-1", to.Add(-r.span), to, r.step)
				if err != nil {
					b.Fatal(err)
				}
				steps = len(counts)
			}
			b.ReportMetric(float64(steps), "rows")
		})
	}
}
