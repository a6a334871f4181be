-- tether schema v16: one liveness check per keepalive for the whole fleet,
-- not one per agent (issue 27). Every agent read pg_locks and probed every
-- agents row every keepalive: N² for a fleet of N.
--   liveness_turn: the one row the agents take turns on. An agent checks
--     only when the last check is a keepalive old (checked_at) or an agent
--     may be found dead now (due_at); whichever comes first takes the turn
--     (liveness_turn.sql). server_started is pg_postmaster_start_time() at
--     the last check: a restart or failover in between voids the memory.
--   agents.lock_free_since, lock_found_dead: the first-free memory (F in
--     docs/operations.md), which used to live in each checking agent. It is
--     the fleet's now, so the checker role can move from one agent to the
--     next, and every view of an agent reads the janitor's verdict.
CREATE TABLE liveness_turn (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    checked_at     timestamptz NOT NULL DEFAULT '-infinity',
    due_at         timestamptz,
    checker        text NOT NULL DEFAULT '',
    server_started timestamptz
);
INSERT INTO liveness_turn DEFAULT VALUES;

ALTER TABLE agents
    ADD COLUMN lock_free_since timestamptz,
    ADD COLUMN lock_found_dead boolean NOT NULL DEFAULT false;
