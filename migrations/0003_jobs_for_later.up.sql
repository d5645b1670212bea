-- Jobs for later in the outbox of enqueue/pgoutbox: a due time per row,
-- unique keys, cancel by job ID, and a short record of produced jobs.

-- The time the job is due. Its own column, not next_attempt_at: a row
-- waiting for a retry (next_attempt_at ahead) still holds back the later
-- rows of its key, while a row not yet due holds back none. Immediate jobs
-- are due at their insert (clock_timestamp(), so that rows of one key
-- inserted one after the other are due in that order); rows from before
-- this migration are due at -infinity, before any new row, in id order.
ALTER TABLE shareq_outbox ADD COLUMN IF NOT EXISTS due_at timestamptz NOT NULL DEFAULT '-infinity';
ALTER TABLE shareq_outbox ALTER COLUMN due_at SET DEFAULT clock_timestamp();

-- The unique key of a job enqueued with pgoutbox.Unique or UniqueFor.
ALTER TABLE shareq_outbox ADD COLUMN IF NOT EXISTS unique_key text;

-- The relay takes due rows in due order: a range scan up to now(), however
-- many rows wait for later; and the earliest row due after now() (its
-- wake-up timer) is the first entry past now().
CREATE INDEX IF NOT EXISTS shareq_outbox_due_idx ON shareq_outbox (due_at, id);

-- Per-key order is due order: the relay looks for a row of the same topic
-- and key due before this one.
DROP INDEX IF EXISTS shareq_outbox_topic_key_idx;
CREATE INDEX IF NOT EXISTS shareq_outbox_topic_key_due_idx ON shareq_outbox (topic, key, due_at, id);

-- pgoutbox.Cancel finds a job by its ID.
CREATE INDEX IF NOT EXISTS shareq_outbox_job_id_idx ON shareq_outbox (job_id);

-- Unique keys: one row per key while its job waits in the outbox
-- (expires_at NULL), and for unique_for after the relay produced it
-- (expires_at set then). The primary key is what makes a second enqueue
-- of a key a duplicate, also between concurrent transactions.
CREATE TABLE IF NOT EXISTS shareq_outbox_unique (
    key        text        PRIMARY KEY,
    job_id     text        NOT NULL,
    unique_for interval    NOT NULL DEFAULT '0',
    expires_at timestamptz
);
CREATE INDEX IF NOT EXISTS shareq_outbox_unique_expires_idx
    ON shareq_outbox_unique (expires_at) WHERE expires_at IS NOT NULL;

-- Job IDs the relay produced, kept for the relay's ProducedRetention, so
-- that pgoutbox.Cancel can tell a produced job from an unknown one.
CREATE TABLE IF NOT EXISTS shareq_outbox_produced (
    job_id      text        PRIMARY KEY,
    produced_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS shareq_outbox_produced_at_idx ON shareq_outbox_produced (produced_at);
