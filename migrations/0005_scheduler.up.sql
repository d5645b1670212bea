-- The state of the periodic scheduler (package scheduler): the last firing
-- of each schedule of each app, written in the transaction that enqueues
-- the firing. A scheduler that becomes the active one reads it to find the
-- firings missed while none ran, and applies the schedule's policy to them.
-- Which firings were enqueued is decided by the outbox's unique keys
-- (shareq_outbox_unique), not by this table.
CREATE TABLE IF NOT EXISTS shareq_scheduler_state (
    app         text        NOT NULL,
    schedule    text        NOT NULL,
    last_firing timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app, schedule)
);
