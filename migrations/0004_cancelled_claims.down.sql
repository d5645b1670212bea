-- A cancel row left behind reads as the claim of a run: its job stays done
-- with, unrun.
ALTER TABLE shareq_processed_jobs DROP COLUMN IF EXISTS cancelled_at;
