-- For the metrics, per command in @commands: the due jobs no agent holds
-- (queued, or released for resuming), counted up to @cap; how long the
-- longest-waiting one has been due (a released job since its release; 0
-- when none); and the live agents claiming the command (state running, and
-- in @live_names: those internal/fleet.Classify counts, the janitor's rule).
-- Every agent runs it every janitor pass.
--
-- Each command is the head of one range of the partial index
-- active_jobs_claim (command, run_after, job_id) WHERE agent_name IS NULL,
-- read in index order and never past @cap rows: the cost is bounded however
-- large the backlog (a count(*) of 1,000,000 due jobs read them all, in
-- every agent, every pass), it does not grow with the finished jobs kept for
-- retention, and it never reads jobs. @cap rows counted means at least @cap.
-- The oldest is the least of greatest(run_after, released_at) over those
-- head rows: exact whenever one of them is not a release later than its
-- run_after (a queued job, released_at NULL, is), since every row past the
-- head has a run_after, and so a wait start, no earlier than theirs. agents
-- is one row per agent.
--
-- Run with JIT off (store.QueryHot): at a large backlog the planner's
-- estimate passes jit_above_cost, and compiling costs more than the read.
SELECT c.command, q.n, q.oldest_s,
       (SELECT count(*)::int FROM agents a
        WHERE a.state = 'running' AND c.command = ANY(a.commands)
          AND a.name = ANY (@live_names::text[]))
FROM (SELECT DISTINCT unnest(@commands::text[]) AS command) c
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
