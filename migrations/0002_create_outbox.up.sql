-- The transactional outbox of enqueue/pgoutbox: one row per job enqueued
-- inside a caller's transaction and not yet relayed to Kafka. The relay
-- produces committed rows in id order and deletes them once the broker
-- has acknowledged them.
CREATE TABLE IF NOT EXISTS shareq_outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text        NOT NULL,
    key             bytea,
    value           bytea       NOT NULL,
    header_keys     text[]      NOT NULL DEFAULT '{}',
    header_values   bytea[]     NOT NULL DEFAULT '{}',
    job_id          text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text
);

-- The relay keeps jobs of one key in order: it looks for an earlier row
-- of the same topic and key.
CREATE INDEX IF NOT EXISTS shareq_outbox_topic_key_idx
    ON shareq_outbox (topic, key, id);

-- Every statement that inserts jobs wakes the relays when it commits.
CREATE OR REPLACE FUNCTION shareq_outbox_notify() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('shareq_outbox', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS shareq_outbox_notify ON shareq_outbox;
CREATE TRIGGER shareq_outbox_notify
    AFTER INSERT ON shareq_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION shareq_outbox_notify();
