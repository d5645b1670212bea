package pgjoblog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// writeTimeout bounds one write or one partition upkeep.
const writeTimeout = 10 * time.Second

// upkeepEvery is the time between two partition upkeeps that succeed.
const upkeepEvery = time.Hour

// daysAhead is the number of days after today whose partitions Run
// creates ahead.
const daysAhead = 2

// failingRetry is the time between two writes while Postgres fails.
const failingRetry = time.Second

// progressEvery is the time between two writes of running jobs' progress.
const progressEvery = time.Second

// dropReportEvery is the least time between two lines about dropped rows.
const dropReportEvery = time.Minute

// Run writes the buffered runs until ctx ends, then writes what is left
// (for at most 10 s) and returns nil. It keeps the table's partitions: it
// creates the next days' and drops those past the retention, at start and
// every hour. Call it once, beside the worker; it returns an error at once
// when it already runs.
func (l *Log) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("pgjoblog: Run is already running; call it once per Log")
	}
	defer l.running.Store(false)
	w := writer{Log: l}
	w.upkeep(ctx)
	flush := time.NewTicker(l.cfg.flushEvery)
	defer flush.Stop()
	progress := time.NewTicker(progressEvery)
	defer progress.Stop()
	for {
		select {
		case <-ctx.Done():
			w.drain(context.WithoutCancel(ctx))
			return nil
		case <-progress.C:
			w.writeProgress(ctx)
		case <-flush.C:
		case <-l.full:
		}
		if !w.now().Before(w.upkeepDue) {
			w.upkeep(ctx)
		}
		w.flushAll(ctx)
		w.reportDrops()
	}
}

// writer is the state of Run's goroutine.
type writer struct {
	*Log
	failing      bool
	failedSince  time.Time
	nextTry      time.Time
	reported     int64 // dropped rows already reported
	lastReported time.Time
	upkeepDue    time.Time
	upkeepFails  bool
}

// flushAll writes batches until the buffer is empty or a write fails.
func (w *writer) flushAll(ctx context.Context) {
	if w.failing && w.now().Before(w.nextTry) {
		return
	}
	for {
		w.mu.Lock()
		batch := w.buf.take(w.cfg.batchRows)
		w.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		if err := w.write(ctx, batch); err != nil {
			w.mu.Lock()
			w.dropped += int64(w.buf.putBack(batch))
			w.mu.Unlock()
			if ctx.Err() == nil { // else Run is stopping: drain writes the batch
				w.failed(err)
			}
			return
		}
		w.back()
	}
}

// drain writes what is left when Run stops, for at most writeTimeout,
// and counts what it could not write as dropped.
func (w *writer) drain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if w.upkeepDue.IsZero() || w.upkeepFails { // Run stopped before its partitions were made
		w.upkeep(ctx)
	}
	w.nextTry = time.Time{}
	w.flushAll(ctx)
	w.mu.Lock()
	left := w.buf.take(w.buf.len())
	w.dropped += int64(len(left))
	w.mu.Unlock()
	if len(left) > 0 {
		w.cfg.logger.Warn("job log: runs not written at stop", "runs", len(left), "table", table)
	}
}

// failed notes a failed write: one Warn line when writing starts failing.
func (w *writer) failed(err error) {
	w.nextTry = w.now().Add(failingRetry)
	if w.failing {
		return
	}
	w.failing, w.failedSince = true, w.now()
	w.cfg.logger.Warn("job log: writing runs fails; the worker goes on, the newest runs wait in memory and older ones are dropped until Postgres answers",
		"table", table, "buffer", w.cfg.buffer, "err", err)
}

// back notes a write that went through: one Info line after failures.
func (w *writer) back() {
	if !w.failing {
		return
	}
	w.failing = false
	w.cfg.logger.Info("job log: writing runs again", "table", table, "down", w.now().Sub(w.failedSince).Round(time.Millisecond), "dropped", w.Dropped())
}

// reportDrops logs the rows dropped since the last report, at most once
// a minute.
func (w *writer) reportDrops() {
	d := w.Dropped()
	if d == w.reported || w.now().Sub(w.lastReported) < dropReportEvery {
		return
	}
	w.cfg.logger.Warn("job log: runs dropped from a full buffer (give pgjoblog.Buffer more rows, or check Postgres)",
		"dropped", d-w.reported, "total", d, "buffer", w.cfg.buffer)
	w.reported, w.lastReported = d, w.now()
}

// insertSQL writes a batch in one statement, each column an array;
// a row already written (same key) is left as it is.
const insertSQL = `INSERT INTO ` + table + ` (job_id, topic, partition, "offset", delivery_count, outcome, ack,
    started_at, ended_at, duration_us, error, worker, trace_id, result, progress, progress_msg)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::int[], $6::text[], $7::text[],
    $8::timestamptz[], $9::timestamptz[], $10::bigint[], $11::text[], $12::text[], $13::text[],
    $14::jsonb[], $15::smallint[], $16::text[])
ON CONFLICT DO NOTHING`

// write inserts batch.
func (w *writer) write(ctx context.Context, batch []Run) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	n := len(batch)
	var (
		ids, topics, outcomes, acks, errs, workers, traces = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		parts, deliveries                                  = make([]int32, n), make([]int32, n)
		offsets, durs                                      = make([]int64, n), make([]int64, n)
		starts, ends                                       = make([]time.Time, n), make([]time.Time, n)
		results                                            = make([]*string, n)
		pcts                                               = make([]*int16, n)
		msgs                                               = make([]string, n)
	)
	for i, r := range batch {
		ids[i], topics[i], outcomes[i], acks[i], errs[i], workers[i], traces[i] = r.JobID, r.Topic, r.Outcome, r.Ack, r.Error, r.Worker, r.TraceID
		parts[i], deliveries[i], offsets[i], durs[i] = r.Partition, r.DeliveryCount, r.Offset, r.Duration.Microseconds()
		starts[i], ends[i] = r.Started, r.Ended
		if r.Result != nil {
			s := string(r.Result)
			results[i] = &s
		}
		if r.Progress != nil {
			p := int16(r.Progress.Percent)
			pcts[i], msgs[i] = &p, r.Progress.Message
		}
	}
	_, err := w.db.Exec(ctx, insertSQL, ids, topics, parts, offsets, deliveries, outcomes, acks, starts, ends, durs, errs, workers, traces, results, pcts, msgs)
	if err != nil {
		return fmt.Errorf("insert %d runs into %s: %w", n, table, err)
	}
	return nil
}

// upkeep creates the partitions of today and the next days and drops
// those past the retention, then again an hour later. A failure is
// tried again a second later (writes into an existing partition go on
// meanwhile); the first of a row is logged.
func (w *writer) upkeep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	err := w.keepPartitions(ctx, w.now())
	switch {
	case err == nil:
		w.upkeepDue, w.upkeepFails = w.now().Add(upkeepEvery), false
	case ctx.Err() != nil:
	default:
		w.upkeepDue = w.now().Add(failingRetry)
		if !w.upkeepFails {
			w.upkeepFails = true
			w.cfg.logger.Warn("job log: keeping the daily partitions fails; tried again every second (apply migrations.Up if the table is missing)", "table", table, "err", err)
		}
	}
}

// advisoryLockID serialises the partition upkeep of workers sharing a
// database ("sqjlog" in ASCII).
const advisoryLockID int64 = 0x73716a6c6f67

// keepPartitions creates the partitions from yesterday to daysAhead days
// after now, and drops those whose last day ended more than the retention
// before now.
func (l *Log) keepPartitions(ctx context.Context, now time.Time) error {
	tx, err := l.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLockID); err != nil {
		return err
	}
	today := now.UTC().Truncate(24 * time.Hour)
	for d := -1; d <= daysAhead; d++ {
		day := today.AddDate(0, 0, d)
		sql := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			partitionName(day), table, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := tx.Exec(ctx, sql); err != nil {
			return err
		}
	}
	old, err := oldPartitions(ctx, tx, now.Add(-l.cfg.retention))
	if err != nil {
		return err
	}
	for _, p := range old {
		if _, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{p}.Sanitize()); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+progressTable+" WHERE updated_at < $1", now.Add(-l.cfg.retention)); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// partitionName is the name of day's partition.
func partitionName(day time.Time) string { return table + "_" + day.Format("20060102") }

// oldPartitions lists the partitions of the table (in the search path's
// schema) named for a day that ended before cutoff.
func oldPartitions(ctx context.Context, tx pgx.Tx, cutoff time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var old []string
	for _, n := range names {
		if len(n) != len(table)+9 || n[:len(table)+1] != table+"_" {
			continue // not one of ours
		}
		day, err := time.Parse("20060102", n[len(table)+1:])
		if err != nil {
			continue
		}
		if !day.AddDate(0, 0, 1).After(cutoff) {
			old = append(old, n)
		}
	}
	return old, nil
}
