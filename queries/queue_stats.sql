-- For the metrics, per command in @commands: the due jobs no agent holds
-- (queued, or released for resuming), how long the longest-waiting one has
-- been due (a released job since its release; 0 when none), and the live agents claiming the command (state
-- running, seen within @live_s seconds). Each command is one range of the
-- partial index active_jobs_claim (command, run_after, job_id) WHERE
-- agent_name IS NULL: cheap however many finished jobs there are, and never
-- reads jobs; agents is one row per agent.
SELECT c.command, q.n, q.oldest_s,
       (SELECT count(*)::int FROM agents a
        WHERE a.state = 'running' AND c.command = ANY(a.commands)
          AND now() - a.last_seen < @live_s::float8 * interval '1 second')
FROM (SELECT DISTINCT unnest(@commands::text[]) AS command) c
CROSS JOIN LATERAL (
    SELECT count(*)::int AS n,
           coalesce(extract(epoch FROM now() - min(greatest(a.run_after, a.released_at))), 0)::float8 AS oldest_s
    FROM active_jobs a
    WHERE a.agent_name IS NULL
      AND a.command = c.command
      AND a.run_after <= now()
) q
ORDER BY c.command;
