-- tether schema v2: the queue of pending plugin Cleanup calls.
-- A row is written in the same transaction that commits the job's terminal
-- status, so Cleanup only ever runs after the outcome is durable. Workers
-- claim due rows with SKIP LOCKED and a claimed_until, so a crashed worker's
-- claim expires; a row leaves the queue only when Cleanup succeeded.

CREATE TABLE cleanups (
    job_id        text PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    plugin        text        NOT NULL,
    command       text        NOT NULL,
    context       jsonb       NOT NULL DEFAULT '{}', -- the job's own; workers merge command defaults
    attempt       integer     NOT NULL,              -- the job's attempt that left remote work behind
    reason        text        NOT NULL DEFAULT '',   -- why the job ended
    attempts      integer     NOT NULL DEFAULT 0,    -- Cleanup calls made so far
    next_at       timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_by    text,                              -- worker agent name
    claimed_until timestamptz                        -- the claim lapses after this
);

-- Workers pick due rows in next_at order.
CREATE INDEX cleanups_next_at ON cleanups (next_at);
