-- The job log of joblog/pgjoblog: one row per delivery of a job that the
-- worker finished (its outcome, acknowledgement, times, error, the result
-- and last progress its handler reported). The
-- table is partitioned by day on ended_at: the job log creates each day's
-- partition ahead (shareq_job_runs_YYYYMMDD) and drops whole partitions
-- past its retention, so keeping or removing rows costs nothing per row.
-- The primary key makes a row written twice (a batch retried after a
-- commit whose answer was lost) one row.
CREATE TABLE IF NOT EXISTS shareq_job_runs (
    job_id         text        NOT NULL,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    delivery_count integer     NOT NULL,
    outcome        text        NOT NULL,
    ack            text        NOT NULL,
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz NOT NULL,
    duration_us    bigint      NOT NULL,
    error          text        NOT NULL DEFAULT '',
    worker         text        NOT NULL DEFAULT '',
    trace_id       text        NOT NULL DEFAULT '',
    result         jsonb,
    progress       smallint,
    progress_msg   text        NOT NULL DEFAULT '',
    PRIMARY KEY (topic, partition, "offset", delivery_count, ended_at)
) PARTITION BY RANGE (ended_at);

CREATE INDEX IF NOT EXISTS shareq_job_runs_job_idx
    ON shareq_job_runs (job_id, ended_at DESC);

-- The last progress of running jobs (handler.Job.Progress), written at
-- most once a second per job; rows older than the job log's retention
-- are deleted. A job's finished runs keep their last progress in
-- shareq_job_runs.
CREATE TABLE IF NOT EXISTS shareq_job_progress (
    job_id         text        PRIMARY KEY,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    delivery_count integer     NOT NULL,
    percent        smallint    NOT NULL,
    message        text        NOT NULL,
    updated_at     timestamptz NOT NULL
);
