-- tether schema v17: one janitor pass per clean_interval for the whole
-- fleet, not one per agent (issue 27). Every agent's pass read every held
-- row and every agents row: N² for a fleet of N.
--   janitor_turn: the one row the agents take turns on
--     (janitor_turn_take.sql). passed_at is when the last pass began,
--     server_started pg_postmaster_start_time() then. stats is the cluster
--     gauges that pass measured (queue per command, agents by state, the
--     Cleanup backlog), which every agent exports, so a scrape of any agent
--     reads the same values and no agent measures them itself.
CREATE TABLE janitor_turn (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    passed_at      timestamptz NOT NULL DEFAULT '-infinity',
    passer         text NOT NULL DEFAULT '',
    server_started timestamptz,
    stats          jsonb,
    stats_at       timestamptz
);
INSERT INTO janitor_turn DEFAULT VALUES;
