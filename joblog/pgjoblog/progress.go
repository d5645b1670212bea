package pgjoblog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shareq/shareq/handler"
)

// progressTable holds the last progress of running jobs (migration 0008).
const progressTable = "shareq_job_progress"

// progressRow is a running job's progress to write.
type progressRow struct {
	jobID, topic string
	partition    int32
	offset       int64
	delivery     int32
	p            handler.Progress
}

// changedProgress returns the progress of the running jobs that changed
// since it was last written, and marks it written.
func (l *Log) changedProgress() []progressRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rows []progressRow
	for j, written := range l.jobs {
		p, ok := j.LastProgress()
		if !ok || p.At.Equal(written) {
			continue
		}
		l.jobs[j] = p.At
		rows = append(rows, progressRow{jobID: j.ID(), topic: j.Topic, partition: j.Partition, offset: j.Offset, delivery: j.DeliveryCount, p: p})
	}
	return rows
}

const upsertProgressSQL = `INSERT INTO ` + progressTable + ` (job_id, topic, partition, "offset", delivery_count, percent, message, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (job_id) DO UPDATE SET topic = excluded.topic, partition = excluded.partition, "offset" = excluded."offset",
    delivery_count = excluded.delivery_count, percent = excluded.percent, message = excluded.message, updated_at = excluded.updated_at
WHERE ` + progressTable + `.updated_at <= excluded.updated_at`

// writeProgress writes the progress of the running jobs that changed in
// one batch. Progress is a hint: a write that fails is not tried again
// (the next change is written), and the job's run keeps its last
// progress.
func (w *writer) writeProgress(ctx context.Context) {
	rows := w.changedProgress()
	if len(rows) == 0 || w.failing {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var b pgx.Batch
	for _, r := range rows {
		b.Queue(upsertProgressSQL, r.jobID, r.topic, r.partition, r.offset, r.delivery, r.p.Percent, r.p.Message, r.p.At)
	}
	if err := w.db.SendBatch(ctx, &b).Close(); err != nil {
		w.failed(fmt.Errorf("write the progress of %d jobs into %s: %w", len(rows), progressTable, err))
	}
}

// Progress returns the last progress that a running job with ID jobID
// reported, written at most a second after it was reported, and false
// when there is none (the job reported none, or longer ago than the
// retention). A finished run keeps its last progress in [Run.Progress].
func (l *Log) Progress(ctx context.Context, jobID string) (handler.Progress, bool, error) {
	var p handler.Progress
	err := l.db.QueryRow(ctx, "SELECT percent, message, updated_at FROM "+progressTable+" WHERE job_id = $1", jobID).
		Scan(&p.Percent, &p.Message, &p.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return handler.Progress{}, false, nil
	}
	if err != nil {
		return handler.Progress{}, false, fmt.Errorf("pgjoblog: read %s: %w (apply migrations.Up if the table is missing)", progressTable, err)
	}
	return p, true, nil
}
