DROP INDEX IF EXISTS shareq_job_runs_topic_ended_idx;
