package pgjoblog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/handler"
	"github.com/shareq/shareq/worker"
)

func job(id string, offset int64, delivery int32) *handler.Job {
	return &handler.Job{Topic: "t", Partition: 1, Offset: offset, DeliveryCount: delivery,
		Headers: []handler.Header{{Key: handler.JobIDHeader, Value: []byte(id)}}}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"Retention": Retention(time.Hour), "Buffer": Buffer(0), "FlushEvery": FlushEvery(0),
		"BatchRows": BatchRows(0), "Logger": Logger(nil),
	} {
		if _, err := New(&pgxpool.Pool{}, opt); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v, want one naming the option", name, err)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil): no error")
	}
}

// The buffer keeps the newest runs: a full one drops its oldest, and a
// batch put back after a failed write loses its oldest rows to the newer
// ones that came meanwhile.
func TestRingKeepsTheNewest(t *testing.T) {
	r := newRing(3)
	for i := range 5 {
		r.push(Run{Offset: int64(i)})
	}
	batch := r.take(2)
	if got := []int64{batch[0].Offset, batch[1].Offset}; !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("took %v, want [2 3]", got)
	}
	r.push(Run{Offset: 5})
	if lost := r.putBack(batch); lost != 1 {
		t.Fatalf("put back lost %d, want 1", lost)
	}
	var got []int64
	for _, run := range r.take(10) {
		got = append(got, run.Offset)
	}
	if !slices.Equal(got, []int64{3, 4, 5}) {
		t.Fatalf("ring holds %v, want [3 4 5]", got)
	}
}

func TestRunOf(t *testing.T) {
	j := job("j1", 7, 2)
	j.Headers = append(j.Headers, handler.Header{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	end := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	long := errors.New(strings.Repeat("é", MaxErrorBytes))
	r := runOf(j, worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Err: long, Duration: time.Second}, end)
	want := Run{JobID: "j1", Topic: "t", Partition: 1, Offset: 7, DeliveryCount: 2, Outcome: "retried", Ack: "release",
		Started: end.Add(-time.Second), Ended: end, Duration: time.Second, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	if len(r.Error) != MaxErrorBytes || !strings.HasPrefix(long.Error(), r.Error) {
		t.Errorf("error of %d bytes, want the first %d of the error's text", len(r.Error), MaxErrorBytes)
	}
	r.Error = ""
	if !reflect.DeepEqual(r, want) {
		t.Errorf("run\n%+v, want\n%+v", r, want)
	}
	if got := traceID([]byte("garbage")); got != "" {
		t.Errorf("traceID of garbage: %q", got)
	}
}

// Runs written through the log are read back by Runs (newest first) and
// Recent; a batch written twice is one set of rows.
func TestRunsAndRecent(t *testing.T) {
	pool := migrated(t)
	l, err := New(pool, FlushEvery(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l.MemberStats(worker.MemberStats{ClientID: "worker-1"})
	start(t, l)
	l.JobFinished(job("a", 1, 1), worker.Result{Outcome: worker.OutcomeRetried, Ack: worker.AckRelease, Err: errors.New("boom"), Ran: true})
	l.JobFinished(job("a", 1, 2), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Ran: true})
	l.JobFinished(job("b", 2, 1), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept, Ran: true})
	waitFor(t, "3 rows", func() bool { return rowCount(t, pool) == 3 })

	runs, err := l.Runs(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].DeliveryCount != 2 || runs[0].Outcome != "succeeded" || runs[1].Error != "boom" || runs[1].Worker != "worker-1" {
		t.Fatalf("runs of a: %+v", runs)
	}
	recent, err := l.Recent(t.Context(), Filter{Outcome: "succeeded", Topic: "t", Since: time.Now().Add(-time.Hour), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(recent) != 1 || recent[0].Outcome != "succeeded" {
		t.Fatalf("recent: %+v", recent)
	}

	w := writer{Log: l}
	if err := w.write(t.Context(), runs); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, pool); n != 3 {
		t.Fatalf("%d rows after writing a batch again, want 3", n)
	}
}

// Retention drops the partitions of days past it, and keeps the others.
func TestRetentionDropsOldPartitions(t *testing.T) {
	pool := migrated(t)
	l, err := New(pool, Retention(7*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := l.keepPartitions(t.Context(), now.AddDate(0, 0, -10)); err != nil {
		t.Fatal(err)
	}
	old := now.AddDate(0, 0, -10)
	w := writer{Log: l}
	if err := w.write(t.Context(), []Run{{JobID: "old", Topic: "t", Outcome: "succeeded", Ack: "accept", Started: old, Ended: old}}); err != nil {
		t.Fatal(err)
	}
	if err := l.keepPartitions(t.Context(), now); err != nil {
		t.Fatal(err)
	}
	var parts []string
	rows, err := pool.Query(t.Context(), "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass ORDER BY 1", table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		_ = rows.Scan(&p)
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for d := -1; d <= daysAhead; d++ {
		want = append(want, partitionName(now.Truncate(24*time.Hour).AddDate(0, 0, d)))
	}
	if !slices.Equal(parts, want) {
		t.Fatalf("partitions %v, want %v (the days of 10 days ago dropped)", parts, want)
	}
	if n := rowCount(t, pool); n != 0 {
		t.Fatalf("%d rows, want the old run dropped with its partition", n)
	}
}

// While Postgres is down JobFinished goes on at once, the log says so
// once, keeps the newest runs and counts the others; when Postgres is
// back the kept runs are written and the log says so once.
func TestPostgresDown(t *testing.T) {
	pool := migrated(t)
	db := &switchable{Pool: pool}
	db.down.Store(true)
	logs := &lines{}
	l, err := New(db, Buffer(10), BatchRows(4), FlushEvery(5*time.Millisecond), Logger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)
	for i := range 50 {
		l.JobFinished(job(fmt.Sprint("j", i), int64(i), 1), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
		time.Sleep(2 * time.Millisecond) // let the writer try, and fail, many times
	}
	waitFor(t, "a warning", func() bool { return logs.count(slog.LevelWarn) >= 1 })
	// 40 once no batch is in flight (a failed batch is counted when it is
	// put back).
	waitFor(t, "40 runs dropped (50 runs, a buffer of 10)", func() bool { return l.Dropped() == 40 })
	db.down.Store(false)
	waitFor(t, "the 10 newest runs written", func() bool { return rowCount(t, pool) == 10 })
	waitFor(t, "the info line", func() bool { return logs.count(slog.LevelInfo) == 1 })
	runs, err := l.Recent(t.Context(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if runs[len(runs)-1].JobID != "j40" {
		t.Errorf("oldest kept run %s, want j40", runs[len(runs)-1].JobID)
	}
	if n := logs.count(slog.LevelWarn); n != 3 {
		t.Errorf("%d warnings, want 3 (one each for the upkeep, the writes, the dropped runs): %v", n, logs.recs)
	}
}

// A pool on a closed port: JobFinished never waits, one warning.
func TestClosedPort(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://x:y@127.0.0.1:1/db?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &lines{}
	l, err := New(pool, FlushEvery(5*time.Millisecond), Logger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	start(t, l)
	began := time.Now()
	for i := range 10000 {
		l.JobFinished(job("j", int64(i), 1), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("10000 JobFinished took %v with Postgres unreachable", d)
	}
	waitFor(t, "the warning about writes", func() bool { return logs.count(slog.LevelWarn) >= 2 })
	time.Sleep(2500 * time.Millisecond) // two retries more: still no new line
	if n := logs.count(slog.LevelWarn); n != 2 {
		t.Errorf("%d warnings, want 2 (upkeep, writes)", n)
	}
}

// A running job's progress is written when it changed since the last
// write, once per write however many times the handler reported it, and
// no longer once the job finished.
func TestChangedProgress(t *testing.T) {
	l, err := New(&pgxpool.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	j := job("p", 1, 1)
	l.JobStarted(j)
	if rows := l.changedProgress(); len(rows) != 0 {
		t.Fatalf("%d rows before any progress", len(rows))
	}
	for i := range 100 {
		j.Progress(i, "step")
	}
	rows := l.changedProgress()
	if len(rows) != 1 || rows[0].p.Percent != 99 || rows[0].jobID != "p" {
		t.Fatalf("rows %+v, want one at 99%%", rows)
	}
	if rows := l.changedProgress(); len(rows) != 0 {
		t.Fatalf("%d rows with no new progress", len(rows))
	}
	j.Progress(100, "done")
	l.JobFinished(j, worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
	if rows := l.changedProgress(); len(rows) != 0 {
		t.Fatalf("%d rows after the job finished", len(rows))
	}
}

// Runs finished before Run got to make the day's partitions are written
// when Run stops at once: its last flush makes them first.
func TestStopBeforeUpkeep(t *testing.T) {
	pool := migrated(t)
	l, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	l.JobFinished(job("early", 1, 1), worker.Result{Outcome: worker.OutcomeSucceeded, Ack: worker.AckAccept})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, pool); n != 1 || l.Dropped() != 0 {
		t.Fatalf("%d rows, %d dropped; want the run written", n, l.Dropped())
	}
}
