-- The agents rows, by name (only @name's unless ''): unless @all, only those not stopped and seen
-- within the larger of @live_s seconds (the answering agent's stale_job)
-- and the row's own stale_job, so the listing reads agents_last_seen and
-- never the stopped history that retention has not pruned yet. The active
-- job count is a lookup through active_jobs_agent per listed agent. Then
-- come the plugins the agent announced as failing their health check and an
-- operator's drain request (agent_drain_request.sql). The
-- last five columns feed internal/fleet.Classify, the rule the janitor
-- judges by: the announced keepalive, dead_after and stale_job (0: not
-- announced) and the liveness check's memory of the name lock.
SELECT a.name, a.generation, a.started_at, a.last_seen,
       extract(epoch FROM now() - a.last_seen)::float8,
       a.state, a.version, a.capacity, a.commands, a.plugins,
       (SELECT count(*) FROM active_jobs x WHERE x.agent_name = a.name)::int,
       a.unhealthy_plugins,
       a.drain_requested_at, a.drain_requested_by, a.drain_reason,
       coalesce(extract(epoch FROM a.keepalive), 0)::float8,
       coalesce(extract(epoch FROM a.dead_after), 0)::float8,
       coalesce(extract(epoch FROM a.stale_job), 0)::float8,
       a.lock_free_since, a.lock_found_dead
FROM agents a
WHERE a.last_seen > CASE WHEN @all::bool THEN '-infinity'::timestamptz
                         ELSE now() - greatest(@live_s::float8 * interval '1 second', a.stale_job) END
  AND (@all::bool OR a.state IN ('running', 'draining'))
  AND (@name::text = '' OR a.name = @name::text)
ORDER BY a.name;
