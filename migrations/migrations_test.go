package migrations_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shareq/shareq/migrations"
)

type version struct {
	Version int64
	Name    string
}

func versions(t *testing.T, pool *pgxpool.Pool) []version {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT version, name FROM shareq_schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	var out []version
	for rows.Next() {
		var v version
		if err := rows.Scan(&v.Version, &v.Name); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// relation returns the kind of the relation name in schema ("r" for a
// table, "i" for an index, "v" for a view) or "" when there is none.
func relation(t *testing.T, pool *pgxpool.Pool, schema, name string) string {
	t.Helper()
	var kind string
	err := pool.QueryRow(t.Context(), `
		SELECT coalesce(max(c.relkind::text), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&kind)
	if err != nil {
		t.Fatal(err)
	}
	return kind
}

func TestUp(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	if err := migrations.Up(t.Context(), pool); err != nil {
		t.Fatalf("Up: %v", err)
	}
	for name, want := range map[string]string{
		"shareq_processed_jobs":                "r",
		"shareq_processed_jobs_claimed_at_idx": "i",
		"shareq_schema_migrations":             "r",
		"shareq_outbox":                        "r",
		"shareq_outbox_topic_key_idx":          "",
		"shareq_outbox_topic_key_due_idx":      "i",
		"shareq_outbox_due_idx":                "i",
		"shareq_outbox_job_id_idx":             "i",
		"shareq_outbox_unique":                 "r",
		"shareq_outbox_produced":               "r",
		"shareq_scheduler_state":               "r",
	} {
		if got := relation(t, pool, schema, name); got != want {
			t.Errorf("relation %s: kind %q, want %q", name, got, want)
		}
	}
	got := versions(t, pool)
	want := []version{{1, "0001_create_processed_jobs"}, {2, "0002_create_outbox"}, {3, "0003_jobs_for_later"}, {4, "0004_cancelled_claims"}, {5, "0005_scheduler"}, {6, "0006_scheduler_schedules"}, {7, "0007_outbox_retry_index"}, {8, "0008_job_log"}, {9, "0009_job_runs_topic_index"}}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded versions = %v, want %v", got, want)
	}
	// The claim table has the shape pgstore relies on.
	if _, err := pool.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key) VALUES ('k')"); err != nil {
		t.Fatal(err)
	}
	tag, err := pool.Exec(t.Context(), "INSERT INTO shareq_processed_jobs (key) VALUES ('k') ON CONFLICT (key) DO NOTHING")
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("second insert of a key: %v, %v rows; want a conflict", err, tag.RowsAffected())
	}
}

// migrationCount is the number of migrations in migrations.FS.
var migrationCount = func() int {
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		panic(err)
	}
	return len(ups)
}()

// A database whose recorded version carries another name than this
// build's (migrated by another build, its migration numbered differently)
// is refused by Up and Down, naming both, and left as it was.
func TestUpRefusesAVersionRecordedUnderAnotherName(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := t.Context()
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+migrations.VersionTable+" SET name = '0006_from_another_build' WHERE version = 6"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM "+migrations.VersionTable+" WHERE version = 7"); err != nil {
		t.Fatal(err)
	}
	before := versions(t, pool)
	for name, f := range map[string]func(context.Context, migrations.DB) error{"Up": migrations.Up, "Down": migrations.Down} {
		err := f(ctx, pool)
		if err == nil || !strings.Contains(err.Error(), "0006_from_another_build") || !strings.Contains(err.Error(), "0006_scheduler_schedules") {
			t.Fatalf("%s = %v, want an error naming the recorded and the embedded migration", name, err)
		}
	}
	if got := versions(t, pool); !slices.Equal(got, before) {
		t.Fatalf("versions after the refusals = %v, want them unchanged: %v", got, before)
	}
}

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	for i := range 3 {
		if err := migrations.Up(t.Context(), pool); err != nil {
			t.Fatalf("Up #%d: %v", i+1, err)
		}
	}
	if got := versions(t, pool); len(got) != migrationCount {
		t.Fatalf("recorded versions after three Ups = %v, want %d", got, migrationCount)
	}
}

func TestUpConcurrent(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- migrations.Up(t.Context(), pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Up: %v", err)
		}
	}
	if got := versions(t, pool); len(got) != migrationCount {
		t.Fatalf("recorded versions after concurrent Ups = %v, want %d", got, migrationCount)
	}
	if relation(t, pool, schema, "shareq_processed_jobs") != "r" {
		t.Fatal("claim table missing")
	}
}

func TestDown(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	ctx := t.Context()
	if err := migrations.Down(ctx, pool); err != nil {
		t.Fatalf("Down on an empty schema: %v", err)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Down(ctx, pool); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if got := relation(t, pool, schema, "shareq_processed_jobs"); got != "" {
		t.Fatalf("claim table still there after Down (kind %q)", got)
	}
	for _, name := range []string{"shareq_outbox", "shareq_outbox_unique", "shareq_outbox_produced"} {
		if got := relation(t, pool, schema, name); got != "" {
			t.Fatalf("%s still there after Down (kind %q)", name, got)
		}
	}
	if got := versions(t, pool); len(got) != 0 {
		t.Fatalf("recorded versions after Down = %v, want none", got)
	}
	if err := migrations.Up(ctx, pool); err != nil {
		t.Fatalf("Up after Down: %v", err)
	}
	if got := versions(t, pool); len(got) != migrationCount {
		t.Fatalf("recorded versions after Up, Down, Up = %v, want %d", got, migrationCount)
	}
}

func TestUpFailureAppliesNothing(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	ctx := t.Context()
	// A view in the table's place: CREATE TABLE IF NOT EXISTS skips it and
	// CREATE INDEX fails on it.
	if _, err := pool.Exec(ctx, "CREATE VIEW shareq_processed_jobs AS SELECT 'k'::text AS key, now() AS claimed_at"); err != nil {
		t.Fatal(err)
	}
	err := migrations.Up(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "0001_create_processed_jobs.up.sql") {
		t.Fatalf("Up over a conflicting view = %v, want an error naming the file", err)
	}
	if got := relation(t, pool, schema, "shareq_schema_migrations"); got != "" {
		t.Fatalf("a failed Up left %s behind (kind %q)", "shareq_schema_migrations", got)
	}
}

func TestNilDB(t *testing.T) {
	t.Parallel()
	if err := migrations.Up(context.Background(), nil); err == nil {
		t.Fatal("Up(nil) succeeded")
	}
}

// execFile runs one migration file of migrations.FS on pool.
func execFile(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	body, err := fs.ReadFile(migrations.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), string(body)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Migration 0003 over an outbox with rows: they are due at once, before
// any new row, and keep their id order; its down file restores 0002's
// table, and up again works.
func TestJobsForLaterMigration(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	ctx := t.Context()
	execFile(t, pool, "0002_create_outbox.up.sql")
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_outbox (topic, value, job_id) VALUES ('t', 'v', 'old-1'), ('t', 'v', 'old-2')"); err != nil {
		t.Fatal(err)
	}
	execFile(t, pool, "0003_jobs_for_later.up.sql")
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_outbox (topic, value, job_id) VALUES ('t', 'v', 'new')"); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT job_id, due_at = '-infinity' FROM shareq_outbox ORDER BY due_at, id")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id string
		var old bool
		if err := rows.Scan(&id, &old); err != nil {
			t.Fatal(err)
		}
		if old != strings.HasPrefix(id, "old") {
			t.Errorf("row %s: due at -infinity %v", id, old)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"old-1", "old-2", "new"}; !slices.Equal(got, want) {
		t.Fatalf("rows in due order = %v, want %v", got, want)
	}
	execFile(t, pool, "0003_jobs_for_later.down.sql")
	for name, want := range map[string]string{
		"shareq_outbox": "r", "shareq_outbox_topic_key_idx": "i",
		"shareq_outbox_due_idx": "", "shareq_outbox_unique": "", "shareq_outbox_produced": "",
	} {
		if got := relation(t, pool, schema, name); got != want {
			t.Errorf("after 0003 down: relation %s kind %q, want %q", name, got, want)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM shareq_outbox").Scan(&n); err != nil || n != 3 {
		t.Fatalf("after 0003 down: %d rows (%v), want the 3 kept", n, err)
	}
	execFile(t, pool, "0003_jobs_for_later.up.sql")
}

// Migration 0004 over a claim table with claims: they stay claims of a
// run (cancelled_at NULL), a cancel row can be written; its down file
// drops the column and keeps every row, and up again works.
func TestCancelledClaimsMigration(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := t.Context()
	execFile(t, pool, "0001_create_processed_jobs.up.sql")
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_processed_jobs (key) VALUES ('ran')"); err != nil {
		t.Fatal(err)
	}
	execFile(t, pool, "0004_cancelled_claims.up.sql")
	execFile(t, pool, "0004_cancelled_claims.up.sql") // idempotent, as Up's files are
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_processed_jobs (key, cancelled_at) VALUES ('stopped', now())"); err != nil {
		t.Fatal(err)
	}
	cancelled := map[string]bool{}
	rows, err := pool.Query(ctx, "SELECT key, cancelled_at IS NOT NULL FROM shareq_processed_jobs")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var c bool
		if err := rows.Scan(&k, &c); err != nil {
			t.Fatal(err)
		}
		cancelled[k] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(cancelled) != 2 || cancelled["ran"] || !cancelled["stopped"] {
		t.Fatalf("after 0004 up: cancelled by key = %v, want ran: false, stopped: true", cancelled)
	}
	execFile(t, pool, "0004_cancelled_claims.down.sql")
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM shareq_processed_jobs").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after 0004 down: %d rows (%v), want the 2 kept", n, err)
	}
	if _, err := pool.Exec(ctx, "SELECT cancelled_at FROM shareq_processed_jobs"); err == nil {
		t.Fatal("after 0004 down: cancelled_at is still there")
	}
	execFile(t, pool, "0004_cancelled_claims.up.sql")
}

// Migration 0005 creates the scheduler's state table, whose primary key
// is one row per app and schedule; its down file drops it, and up again
// works.
func TestSchedulerMigration(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	ctx := t.Context()
	execFile(t, pool, "0005_scheduler.up.sql")
	if got := relation(t, pool, schema, "shareq_scheduler_state"); got != "r" {
		t.Fatalf("relation shareq_scheduler_state: kind %q, want r", got)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_scheduler_state (app, schedule, last_firing) VALUES ('a', 's', now())"); err != nil {
		t.Fatal(err)
	}
	tag, err := pool.Exec(ctx, "INSERT INTO shareq_scheduler_state (app, schedule, last_firing) VALUES ('a', 's', now()) ON CONFLICT (app, schedule) DO NOTHING")
	if err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("second row of one schedule: %v, %v rows; want a conflict", err, tag.RowsAffected())
	}
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_scheduler_state (app, schedule, last_firing) VALUES ('b', 's', now())"); err != nil {
		t.Fatalf("same schedule name in another app: %v", err)
	}
	execFile(t, pool, "0005_scheduler.down.sql")
	if got := relation(t, pool, schema, "shareq_scheduler_state"); got != "" {
		t.Fatalf("after 0005 down: relation shareq_scheduler_state kind %q, want none", got)
	}
	execFile(t, pool, "0005_scheduler.up.sql")
}

// Migration 0006 adds what the scheduler records for operators to its
// state table, and lets a schedule that has not fired yet have a row; its
// down file drops those rows and columns, and up again works.
func TestSchedulerSchedulesMigration(t *testing.T) {
	t.Parallel()
	pool, _ := newPool(t)
	ctx := t.Context()
	execFile(t, pool, "0005_scheduler.up.sql")
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_scheduler_state (app, schedule, last_firing) VALUES ('a', 'fired', now())"); err != nil {
		t.Fatal(err)
	}
	execFile(t, pool, "0006_scheduler_schedules.up.sql")
	if _, err := pool.Exec(ctx, `INSERT INTO shareq_scheduler_state (app, schedule, spec, next_firing, leader)
		VALUES ('a', 'new', 'every 1h0m0s', now(), 'host/1')`); err != nil {
		t.Fatalf("a schedule without a firing: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM shareq_scheduler_state WHERE spec IS NULL AND last_firing IS NOT NULL").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the row from before 0006: %d, %v; want it kept, without a spec", n, err)
	}
	execFile(t, pool, "0006_scheduler_schedules.down.sql")
	if _, err := pool.Exec(ctx, "SELECT spec FROM shareq_scheduler_state"); err == nil {
		t.Fatal("after 0006 down: spec is still there")
	}
	rows, _ := pool.Query(ctx, "SELECT schedule FROM shareq_scheduler_state")
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) != 1 || names[0] != "fired" {
		t.Fatalf("after 0006 down: schedules %v, %v; want [fired]", names, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO shareq_scheduler_state (app, schedule) VALUES ('a', 'x')"); err == nil {
		t.Fatal("after 0006 down: a row without last_firing was accepted")
	}
	execFile(t, pool, "0006_scheduler_schedules.up.sql")
}

// Migration 0007 adds a partial index of the outbox's failing rows; its
// down file drops it, and up again works.
func TestOutboxRetryIndexMigration(t *testing.T) {
	t.Parallel()
	pool, schema := newPool(t)
	for _, f := range []string{"0002_create_outbox.up.sql", "0003_jobs_for_later.up.sql", "0007_outbox_retry_index.up.sql"} {
		execFile(t, pool, f)
	}
	if got := relation(t, pool, schema, "shareq_outbox_retry_idx"); got != "i" {
		t.Fatalf("relation shareq_outbox_retry_idx: kind %q, want i", got)
	}
	var pred string
	if err := pool.QueryRow(t.Context(), "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = $1::regclass", schema+".shareq_outbox_retry_idx").Scan(&pred); err != nil {
		t.Fatal(err)
	}
	if pred != "(attempts > 0)" {
		t.Fatalf("index predicate %q, want (attempts > 0)", pred)
	}
	execFile(t, pool, "0007_outbox_retry_index.down.sql")
	if got := relation(t, pool, schema, "shareq_outbox_retry_idx"); got != "" {
		t.Fatalf("after 0007 down: relation shareq_outbox_retry_idx kind %q, want none", got)
	}
	execFile(t, pool, "0007_outbox_retry_index.up.sql")
}
