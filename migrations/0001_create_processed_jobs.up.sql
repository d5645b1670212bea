-- Claim rows of the idempotency middleware (idempotency/pgstore): one row
-- per job whose handler committed. The row is inserted in the same
-- transaction as the handler's side effects.
CREATE TABLE IF NOT EXISTS shareq_processed_jobs (
    key        text        PRIMARY KEY,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

-- The retention sweep deletes rows by age.
CREATE INDEX IF NOT EXISTS shareq_processed_jobs_claimed_at_idx
    ON shareq_processed_jobs (claimed_at);
