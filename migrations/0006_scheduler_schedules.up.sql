-- What an operator sees of the periodic scheduler (shareq jobs
-- schedules): each schedule's spec and next firing and the process that
-- leads, recorded by the active scheduler of each app. The scheduler
-- writes every schedule's row when it becomes the active one (a schedule
-- that has not fired yet has no last_firing then) and again with each
-- firing. Leadership itself stays the advisory lock: leader and
-- next_firing say what the last active scheduler recorded, which is
-- current only while the lock is held.
ALTER TABLE shareq_scheduler_state ALTER COLUMN last_firing DROP NOT NULL;
ALTER TABLE shareq_scheduler_state ADD COLUMN IF NOT EXISTS spec text;
ALTER TABLE shareq_scheduler_state ADD COLUMN IF NOT EXISTS next_firing timestamptz;
ALTER TABLE shareq_scheduler_state ADD COLUMN IF NOT EXISTS leader text;
