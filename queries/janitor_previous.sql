-- At agent start: lock what earlier generations of this agent's name still
-- hold (after job_id @after, up to @batch rows, through active_jobs_agent),
-- with the same columns as janitor_candidates. Waits for locks rather than
-- skipping: every such row must be settled before the agent claims anything.
-- A row another janitor settled meanwhile no longer matches and drops out.
--
-- served/loaded/resumable are judged from the other live agents (state
-- 'running', last_seen within @stale_job seconds) serving the job's command;
-- the agents row of an earlier generation of this name is not one of them
-- (it is the process being replaced). The caller adds what this process
-- serves itself.
WITH live AS MATERIALIZED (
    SELECT l.commands, l.plugins
    FROM agents l
    WHERE l.state = 'running' AND l.last_seen > now() - @stale_job::float8 * interval '1 second'
      AND (l.name <> @self_name OR l.generation = @self_generation)
)
SELECT a.job_id, j.status, j.plugin, a.command, j.started_at IS NOT NULL,
       coalesce(a.agent_name, ''), coalesce(a.agent_generation, ''), a.lease,
       extract(epoch FROM now() - coalesce(a.last_heartbeat, a.claimed_at, 'epoch'))::float8,
       a.released_at IS NOT NULL,
       coalesce(extract(epoch FROM now() - a.released_at), 0)::float8,
       g.name IS NOT NULL, coalesce(g.generation, ''), coalesce(g.state, ''),
       coalesce(extract(epoch FROM now() - g.last_seen), 0)::float8,
       EXISTS (SELECT 1 FROM live l WHERE a.command = ANY (l.commands)),
       EXISTS (SELECT 1 FROM live l WHERE a.command = ANY (l.commands) AND l.plugins ? j.plugin),
       EXISTS (SELECT 1 FROM live l WHERE a.command = ANY (l.commands)
                 AND l.plugins -> j.plugin -> 'capabilities' ? 'resume'),
       extract(epoch FROM j.pending_timeout)::float8,
       CASE WHEN isfinite(a.run_after) THEN extract(epoch FROM now() - a.run_after)::float8 ELSE 0 END,
       extract(epoch FROM j.active_timeout)::float8,
       coalesce(extract(epoch FROM now() - j.attempt_started_at), 0)::float8,
       false,
       false, -- dead: the previous generation is settled as restarted instead
       coalesce(extract(epoch FROM g.keepalive), 0)::float8,
       coalesce(extract(epoch FROM g.dead_after), 0)::float8,
       coalesce(extract(epoch FROM g.stale_job), 0)::float8
FROM active_jobs a
JOIN jobs j ON j.id = a.job_id
LEFT JOIN agents g ON g.name = a.agent_name
WHERE a.agent_name = @self_name AND a.agent_generation IS DISTINCT FROM @self_generation
  AND a.job_id > @after
ORDER BY a.job_id
LIMIT @batch
FOR UPDATE OF a;
