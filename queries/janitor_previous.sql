-- At agent start: lock what earlier generations of this agent's name still
-- hold (after job_id $3, up to $4 rows), with the same columns as
-- janitor_candidates. Waits for locks rather than skipping: every such row
-- must be settled before the agent claims anything. A row another janitor
-- settled meanwhile no longer matches and drops out.
SELECT a.job_id, j.status, j.plugin, j.command, j.started_at IS NOT NULL,
       coalesce(a.agent_name, ''), coalesce(a.agent_generation, ''), a.lease,
       extract(epoch FROM now() - coalesce(a.last_heartbeat, a.claimed_at, 'epoch'))::float8,
       a.released_at IS NOT NULL,
       coalesce(extract(epoch FROM now() - a.released_at), 0)::float8,
       g.name IS NOT NULL, coalesce(g.generation, ''), coalesce(g.state, ''),
       coalesce(extract(epoch FROM now() - g.last_seen), 0)::float8,
       false, false,
       extract(epoch FROM j.pending_timeout)::float8,
       CASE WHEN isfinite(a.run_after) THEN extract(epoch FROM now() - a.run_after)::float8 ELSE 0 END,
       extract(epoch FROM j.active_timeout)::float8,
       coalesce(extract(epoch FROM now() - j.attempt_started_at), 0)::float8
FROM active_jobs a
JOIN jobs j ON j.id = a.job_id
LEFT JOIN agents g ON g.name = a.agent_name
WHERE a.agent_name = $1 AND a.agent_generation IS DISTINCT FROM $2
  AND a.job_id > $3
ORDER BY a.job_id
LIMIT $4
FOR UPDATE OF a;
