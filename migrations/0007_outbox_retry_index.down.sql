DROP INDEX IF EXISTS shareq_outbox_retry_idx;
