-- One row per command known to the answering agent's config (@config_names
-- with @config_plugins, in the same order), announced by any agents row, or
-- with queued jobs: its plugin, the live agents claiming it (@live_names:
-- those internal/fleet.Classify counts, the janitor's rule; by state), and
-- its queued jobs — how many, and how long the longest-waiting one that is
-- due has waited (NULL when none is due). A running agent whose plugin for
-- the command fails its health check (agents.unhealthy_plugins) claims none
-- of its jobs. It is listed apart, as unhealthy.
WITH config AS (
    SELECT c.name, c.plugin
    FROM unnest(@config_names::text[], @config_plugins::text[]) AS c(name, plugin)
), queued AS (
    SELECT j.command, count(*)::int AS n,
           max(extract(epoch FROM now() - a.run_after)) FILTER (WHERE a.run_after <= now())::float8 AS oldest_s
    FROM jobs j JOIN active_jobs a ON a.job_id = j.id
    WHERE j.status = 'queued'
    GROUP BY j.command
), names AS (
    SELECT name FROM config
    UNION SELECT unnest(commands) FROM agents
    UNION SELECT command FROM queued
), live AS (
    SELECT a.name, a.state, c.command,
           coalesce(a.unhealthy_plugins ? (a.command_specs -> c.command ->> 'plugin'), false) AS unhealthy
    FROM agents a
    CROSS JOIN LATERAL unnest(a.commands) AS c(command)
    WHERE a.state IN ('running', 'draining')
      AND a.name = ANY (@live_names::text[])
)
SELECT n.name,
       coalesce(c.plugin, (SELECT j.plugin FROM jobs j WHERE j.command = n.name ORDER BY j.id DESC LIMIT 1), ''),
       c.name IS NOT NULL,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM live l WHERE l.command = n.name AND l.state = 'running' AND NOT l.unhealthy), '{}'),
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM live l WHERE l.command = n.name AND l.state = 'draining'), '{}'),
       coalesce(q.n, 0),
       q.oldest_s,
       coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM live l WHERE l.command = n.name AND l.state = 'running' AND l.unhealthy), '{}')
FROM names n
LEFT JOIN config c ON c.name = n.name
LEFT JOIN queued q ON q.command = n.name
ORDER BY n.name;
