-- Rows of the outbox whose produce failed (attempts > 0), by topic and key
-- in due order. A row waiting for a retry holds back the later rows of its
-- key; the relay leaves those rows out of its claim, and this index makes
-- the check one probe of a small index (the failing rows only) per row.
-- Without it the relay is as correct, and slower on keys with many rows.
CREATE INDEX IF NOT EXISTS shareq_outbox_retry_idx
    ON shareq_outbox (topic, key, due_at, id) WHERE attempts > 0;
