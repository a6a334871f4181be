-- What live agents announce of the commands they serve (schema v15
-- command_specs), so any agent can accept a submit as the serving one
-- would. Live is state running or draining, seen within the larger of
-- @live_s seconds and its own announced stale_job, and not found dead by
-- the liveness check (silent since), as internal/fleet.Classify judges it.
-- One row per command: the spec a
-- submit resolves with, whose it is, and every live agent announcing it.
-- When they disagree, a running agent's spec wins over a draining one's
-- (that one is leaving), then the most recently started agent's (in a
-- rolling deploy, the new configuration), then the first by name.
WITH live AS (
    SELECT c.key AS command, c.value AS spec, a.name,
           row_number() OVER (PARTITION BY c.key
                              ORDER BY a.state = 'running' DESC, a.started_at DESC, a.name) AS rank
    FROM agents a
    CROSS JOIN LATERAL jsonb_each(a.command_specs) AS c
    WHERE a.state IN ('running', 'draining')
      AND a.last_seen > now() - greatest(@live_s::float8 * interval '1 second', a.stale_job)
      AND NOT (a.lock_found_dead AND a.last_seen <= a.lock_free_since)
)
SELECT l.command, b.spec, b.name, array_agg(l.name ORDER BY l.name)
FROM live l
JOIN live b ON b.command = l.command AND b.rank = 1
GROUP BY l.command, b.spec, b.name
ORDER BY l.command;
