-- Every agents row as internal/fleet.Classify judges it (the janitor's rule
-- for who is alive): name, state, commands, last_seen and the silence since,
-- the announced keepalive, dead_after and stale_job (0: not announced), and
-- the liveness check's memory of its name lock. The gauges read it every
-- janitor pass, GET /api/v1/commands per request: one row per agent.
SELECT a.name, a.state, a.commands, a.last_seen,
       extract(epoch FROM now() - a.last_seen)::float8,
       coalesce(extract(epoch FROM a.keepalive), 0)::float8,
       coalesce(extract(epoch FROM a.dead_after), 0)::float8,
       coalesce(extract(epoch FROM a.stale_job), 0)::float8,
       a.lock_free_since, a.lock_found_dead
FROM agents a
ORDER BY a.name;
