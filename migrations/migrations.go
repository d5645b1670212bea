// Package migrations holds the database schema shareq needs, as numbered
// plain SQL files embedded in [FS], and applies them with [Up].
//
// The files are named NNNN_title.up.sql and NNNN_title.down.sql, the
// layout golang-migrate reads, so a team that manages its schema with its
// own tool can copy them or hand it [FS] (golang-migrate:
// iofs.New(migrations.FS, ".")). Tools that want one file per migration
// with annotations (goose) need the pair joined by hand.
//
// [Up] is the built-in way: it applies the pending migrations in order,
// in one transaction, and records each version in the table
// shareq_schema_migrations. It is idempotent and safe to call from every
// worker at start-up: concurrent calls against one database wait for each
// other on a transaction-scoped advisory lock, and the later ones find
// nothing to do.
//
// Tables are created in the first schema of the connection's search_path.
//
//	0001  shareq_processed_jobs: the claim rows of idempotency/pgstore
//	0002  shareq_outbox: the transactional outbox of enqueue/pgoutbox
//	0003  jobs for later in the outbox: due times, unique keys
//	      (shareq_outbox_unique), cancel, produced job IDs
//	      (shareq_outbox_produced)
//	0004  cancelled_at in shareq_processed_jobs: a produced job cancelled
//	      by pgoutbox.CancelTx, which the worker does not run
//	0005  shareq_scheduler_state: the last firing of each periodic
//	      schedule (package scheduler)
//	0006  spec, next_firing and leader in shareq_scheduler_state: what
//	      the active scheduler records for operators (shareq jobs
//	      schedules); last_firing NULL for a schedule not fired yet
//	0007  shareq_outbox_retry_idx: the outbox rows whose produce failed,
//	      by key, for the relay to pass over the rows they hold back
//	0008  shareq_job_runs: the job log of joblog/pgjoblog, one row per
//	      finished delivery, partitioned by day on ended_at; and
//	      shareq_job_progress, the last progress of running jobs
//	0009  shareq_job_runs_topic_ended_idx: the job log's runs by topic
//	      and end time, with the outcome, for counts per outcome over
//	      time (pgjoblog.CountOutcomes, the console's charts)
package migrations

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// FS holds the migration files, NNNN_title.up.sql and NNNN_title.down.sql,
// at its root.
//
//go:embed *.sql
var FS embed.FS

// VersionTable is the table in which [Up] records applied versions.
const VersionTable = "shareq_schema_migrations"

// advisoryLockID is the pg_advisory_xact_lock key that serialises Up and
// Down calls against one database ("shareq" in ASCII).
const advisoryLockID int64 = 0x736861726571

// DB begins transactions. A *pgxpool.Pool and a *pgx.Conn fit.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

type migration struct {
	version  int64
	name     string // file name without .up.sql / .down.sql
	up, down string
}

var fileRE = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.(up|down)\.sql$`)

// load reads the migrations from fsys, ordered by version, and checks that
// every version has both an up and a down file.
func load(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	byVersion := map[int64]*migration{}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: %s: name is not NNNN_title.up.sql or NNNN_title.down.sql", e.Name())
		}
		v, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("migrations: %s: bad version %q", e.Name(), m[1])
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		name := m[1] + "_" + m[2]
		mig := byVersion[v]
		if mig == nil {
			mig = &migration{version: v, name: name}
			byVersion[v] = mig
		} else if mig.name != name {
			return nil, fmt.Errorf("migrations: version %d has two names, %s and %s", v, mig.name, name)
		}
		if m[3] == "up" {
			mig.up = string(body)
		} else {
			mig.down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migrations: %s: needs both an .up.sql and a .down.sql file", m.name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	return out, nil
}

// Up applies the migrations in [FS] that the database has not recorded in
// [VersionTable], in version order, and records them. All of them are
// applied in one transaction: when one fails, none is applied, and the
// error names the file. Up is idempotent, and concurrent calls (from
// several workers starting at once) are serialised on an advisory lock.
func Up(ctx context.Context, db DB) error {
	ms, err := load(FS)
	if err != nil {
		return err
	}
	return inLockedTx(ctx, db, ms, func(tx pgx.Tx, applied map[int64]bool) error {
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.up); err != nil {
				return fmt.Errorf("migrations: apply %s.up.sql: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+VersionTable+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return fmt.Errorf("migrations: record %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// Down reverts every migration in [FS] that the database has recorded, in
// reverse version order, in one transaction, and removes their records.
// It drops shareq's tables and the claims in them: use it to uninstall,
// not to roll back a deployment.
func Down(ctx context.Context, db DB) error {
	ms, err := load(FS)
	if err != nil {
		return err
	}
	return inLockedTx(ctx, db, ms, func(tx pgx.Tx, applied map[int64]bool) error {
		for _, m := range slices.Backward(ms) {
			if !applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.down); err != nil {
				return fmt.Errorf("migrations: apply %s.down.sql: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+VersionTable+" WHERE version = $1", m.version); err != nil {
				return fmt.Errorf("migrations: unrecord %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// inLockedTx runs fn in a transaction that holds the migrations advisory
// lock, with the versions recorded so far, and commits when fn succeeds.
// A version recorded under another name than ms give it fails before fn
// runs: the database was migrated by another build, and applying or
// reverting by number alone would skip or undo the wrong migration.
func inLockedTx(ctx context.Context, db DB, ms []migration, fn func(tx pgx.Tx, applied map[int64]bool) error) (err error) {
	if db == nil {
		return errors.New("migrations: nil DB")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrations: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLockID); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+VersionTable+` (
		version    bigint      PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrations: create %s: %w", VersionTable, err)
	}
	rows, err := tx.Query(ctx, "SELECT version, name FROM "+VersionTable)
	if err != nil {
		return fmt.Errorf("migrations: read %s: %w", VersionTable, err)
	}
	type record struct {
		Version int64
		Name    string
	}
	recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[record])
	if err != nil {
		return fmt.Errorf("migrations: read %s: %w", VersionTable, err)
	}
	names := make(map[int64]string, len(ms))
	for _, m := range ms {
		names[m.version] = m.name
	}
	applied := make(map[int64]bool, len(recorded))
	for _, r := range recorded {
		if name, ok := names[r.Version]; ok && name != r.Name {
			return fmt.Errorf("migrations: %s records version %d as %s, but this build's version %d is %s: the database was migrated by another build of shareq; migrate it with that build's migrations, or fix %s by hand",
				VersionTable, r.Version, r.Name, r.Version, name, VersionTable)
		}
		applied[r.Version] = true
	}
	if err := fn(tx, applied); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrations: commit: %w", err)
	}
	return nil
}
