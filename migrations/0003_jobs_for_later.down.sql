DROP TABLE IF EXISTS shareq_outbox_produced;
DROP TABLE IF EXISTS shareq_outbox_unique;
DROP INDEX IF EXISTS shareq_outbox_job_id_idx;
DROP INDEX IF EXISTS shareq_outbox_topic_key_due_idx;
DROP INDEX IF EXISTS shareq_outbox_due_idx;
CREATE INDEX IF NOT EXISTS shareq_outbox_topic_key_idx ON shareq_outbox (topic, key, id);
ALTER TABLE shareq_outbox DROP COLUMN IF EXISTS unique_key;
ALTER TABLE shareq_outbox DROP COLUMN IF EXISTS due_at;
