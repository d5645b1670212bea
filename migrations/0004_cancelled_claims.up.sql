-- Cancelled jobs in the claim table of idempotency/pgstore. A cancel of a
-- job that the relay of enqueue/pgoutbox already produced
-- (pgoutbox.CancelTx with pgoutbox.ClaimKey) inserts the job's claim key
-- with cancelled_at set, in the caller's transaction; the worker's claim
-- then finds the key taken by a cancel and ACCEPTs the job without
-- running its handler (outcome cancelled). NULL for the claim of a run.
-- The key's primary key decides a cancel racing the job's start: the
-- later of the two inserts waits for the earlier transaction and then
-- finds its row.
ALTER TABLE shareq_processed_jobs ADD COLUMN IF NOT EXISTS cancelled_at timestamptz;
