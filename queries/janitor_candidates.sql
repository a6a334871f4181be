-- One janitor batch: lock up to $5 active rows (after job_id $4) that may need
-- the janitor, with their job, owning agent and the plugin capabilities live
-- agents announce. The filter mirrors janitor.Decide loosely (a superset, so
-- the rows of a slow but live agent are not locked every pass); the janitor
-- decides in Go and applies in the same transaction. SKIP LOCKED lets every agent's janitor run
-- side by side; the locks on active_jobs are held until commit.
-- $1 offline_after, $2 awol_timeout, $3 stale_job, $6 active_timeout grace
-- (seconds).
SELECT a.job_id, j.status, j.plugin, j.command, j.started_at IS NOT NULL,
       coalesce(a.agent_name, ''), coalesce(a.agent_generation, ''), a.lease,
       extract(epoch FROM now() - coalesce(a.last_heartbeat, a.claimed_at, 'epoch'))::float8,
       a.released_at IS NOT NULL,
       coalesce(extract(epoch FROM now() - a.released_at), 0)::float8,
       g.name IS NOT NULL, coalesce(g.generation, ''), coalesce(g.state, ''),
       coalesce(extract(epoch FROM now() - g.last_seen), 0)::float8,
       EXISTS (SELECT 1 FROM agents l
               WHERE l.state <> 'stopped' AND l.last_seen > now() - $3::float8 * interval '1 second'
                 AND l.plugins ? j.plugin),
       EXISTS (SELECT 1 FROM agents l
               WHERE l.state <> 'stopped' AND l.last_seen > now() - $3::float8 * interval '1 second'
                 AND l.plugins -> j.plugin -> 'capabilities' ? 'resume'),
       extract(epoch FROM j.pending_timeout)::float8,
       CASE WHEN isfinite(a.run_after) THEN extract(epoch FROM now() - a.run_after)::float8 ELSE 0 END,
       extract(epoch FROM j.active_timeout)::float8,
       coalesce(extract(epoch FROM now() - j.attempt_started_at), 0)::float8
FROM active_jobs a
JOIN jobs j ON j.id = a.job_id
LEFT JOIN agents g ON g.name = a.agent_name
WHERE a.job_id > $4
  AND (
        (a.agent_name IS NOT NULL AND (
             g.name IS NULL
          OR g.generation IS DISTINCT FROM a.agent_generation
          OR g.state = 'stopped'
          OR coalesce(a.last_heartbeat, a.claimed_at, 'epoch') < now() - $3::float8 * interval '1 second'
          OR (coalesce(a.last_heartbeat, a.claimed_at, 'epoch') < now() - $1::float8 * interval '1 second'
              AND (j.status IN ('queued', 'accepted') OR (j.status = 'canceling' AND j.started_at IS NULL)))))
     OR (a.agent_name IS NULL AND j.status = 'canceling')
     OR (a.agent_name IS NULL AND j.status = 'running'
         AND a.released_at < now() - $2::float8 * interval '1 second')
     -- pending_timeout, counted from when the job last became due (run_after).
     OR (a.agent_name IS NULL AND j.status = 'queued' AND j.pending_timeout > interval '0'
         AND a.run_after < now() - j.pending_timeout)
     -- active_timeout backup for an owner that did not enforce it ($6 grace).
     OR (a.agent_name IS NOT NULL AND j.status = 'running' AND j.active_timeout > interval '0'
         AND j.attempt_started_at < now() - j.active_timeout - $6::float8 * interval '1 second')
  )
ORDER BY a.job_id
LIMIT $5
FOR UPDATE OF a SKIP LOCKED;
