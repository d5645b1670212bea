DROP TABLE IF EXISTS shareq_job_progress;
DROP TABLE IF EXISTS shareq_job_runs;
