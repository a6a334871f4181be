-- For the metrics, per command the database knows — @commands (the
-- answering agent's config), every command an agents row announces, and
-- every command with unowned jobs — at most @max_commands of them (the
-- configured ones first, then by name): the due jobs no agent holds
-- (queued, or released for resuming), counted up to @cap; how long the
-- longest-waiting one has been due (a released job since its release; 0
-- when none); and the live agents claiming the command (state running, and
-- in @live_names: those internal/fleet.Classify counts, the janitor's rule).
-- Every agent runs it every janitor pass. A command whose agents are all
-- gone keeps its series, at 0 live agents.
--
-- The commands with unowned jobs are a skip scan of the partial index
-- active_jobs_claim (command, run_after, job_id) WHERE agent_name IS NULL:
-- one index probe per distinct command (never more than @max_commands), not
-- a read of the backlog. The agents table is small (pruned after
-- agent_retention).
--
-- Each command is then the head of one range of that index, read in index
-- order and never past @cap rows: the cost is bounded however large the
-- backlog (a count(*) of 1,000,000 due jobs read them all, in every agent,
-- every pass), it does not grow with the finished jobs kept for retention,
-- and it never reads jobs. @cap rows counted means at least @cap. The oldest
-- is the least of greatest(run_after, released_at) over those head rows:
-- exact whenever one of them is not a release later than its run_after (a
-- queued job, released_at NULL, is), since every row past the head has a
-- run_after, and so a wait start, no earlier than theirs. agents is one row
-- per agent.
--
-- Run with JIT off (store.QueryHot): at a large backlog the planner's
-- estimate passes jit_above_cost, and compiling costs more than the read.
WITH RECURSIVE unowned (command, n) AS (
    (SELECT a.command, 1 FROM active_jobs a WHERE a.agent_name IS NULL ORDER BY a.command LIMIT 1)
    UNION ALL
    SELECT (SELECT a.command FROM active_jobs a
            WHERE a.agent_name IS NULL AND a.command > u.command
            ORDER BY a.command LIMIT 1), u.n + 1
    FROM unowned u
    WHERE u.command IS NOT NULL AND u.n < @max_commands
), known AS (
    SELECT k.command, bool_or(k.configured) AS configured
    FROM (SELECT unnest(@commands::text[]) AS command, true AS configured
          UNION ALL SELECT unnest(commands), false FROM agents
          UNION ALL SELECT command, false FROM unowned WHERE command IS NOT NULL) k
    GROUP BY k.command
    ORDER BY bool_or(k.configured) DESC, k.command
    LIMIT @max_commands
)
SELECT c.command, q.n, q.oldest_s,
       (SELECT count(*)::int FROM agents a
        WHERE a.state = 'running' AND c.command = ANY(a.commands)
          AND a.name = ANY (@live_names::text[]))
FROM known c
CROSS JOIN LATERAL (
    SELECT count(*)::int AS n,
           coalesce(extract(epoch FROM now() - min(greatest(h.run_after, h.released_at))), 0)::float8 AS oldest_s
    FROM (
        SELECT a.run_after, a.released_at
        FROM active_jobs a
        WHERE a.agent_name IS NULL
          AND a.command = c.command
          AND a.run_after <= now()
        ORDER BY a.run_after, a.job_id
        LIMIT @cap
    ) h
) q
ORDER BY c.command;
