-- The agents rows, by name: only the live ones (state running or draining,
-- seen within @live_s seconds) unless @all. The bound on last_seen is a
-- constant for the statement, so the live listing reads agents_last_seen and
-- never the stopped history that retention has not pruned yet. The active
-- job count is a lookup through active_jobs_agent per listed agent.
SELECT a.name, a.generation, a.started_at, a.last_seen,
       extract(epoch FROM now() - a.last_seen)::float8,
       a.state, a.version, a.capacity, a.commands, a.plugins,
       (SELECT count(*) FROM active_jobs x WHERE x.agent_name = a.name)::int,
       a.state IN ('running', 'draining') AND a.last_seen > now() - @live_s::float8 * interval '1 second'
FROM agents a
WHERE a.last_seen > CASE WHEN @all::bool THEN '-infinity'::timestamptz
                         ELSE now() - @live_s::float8 * interval '1 second' END
  AND (@all::bool OR a.state IN ('running', 'draining'))
ORDER BY a.name;
