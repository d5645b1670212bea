-- The rows of schedules that never fired hold no state 0005 can keep.
DELETE FROM shareq_scheduler_state WHERE last_firing IS NULL;
ALTER TABLE shareq_scheduler_state ALTER COLUMN last_firing SET NOT NULL;
ALTER TABLE shareq_scheduler_state DROP COLUMN IF EXISTS leader;
ALTER TABLE shareq_scheduler_state DROP COLUMN IF EXISTS next_firing;
ALTER TABLE shareq_scheduler_state DROP COLUMN IF EXISTS spec;
