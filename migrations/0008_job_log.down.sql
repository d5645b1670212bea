DROP TABLE IF EXISTS shareq_job_runs;
