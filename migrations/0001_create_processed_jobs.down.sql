DROP TABLE IF EXISTS shareq_processed_jobs;
