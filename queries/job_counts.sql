-- Jobs per status matching the list's filters (command, submitter, the
-- created_at window, and @agent: the jobs it holds now), for the console's
-- counts. Each part reads a bounded number of rows, never the whole table:
--
-- * Held jobs (accepted, running, canceling under a lease): active_jobs rows
--   with a holder (index active_jobs_agent), as many as the fleet's
--   capacity. Counted exactly.
-- * Unowned live jobs (queued, released for resuming, an unowned
--   canceling one): active_jobs rows without a holder, read up to @cap + 1
--   of them. Past @cap the counts of this part are flagged at_least.
-- * Ended jobs (succeeded, failed, canceled): for each status, up to
--   @cap + 1 entries of jobs_indexed_status_id (index-only when no filter
--   needs the row). Past @cap the count is @cap + 1, flagged at_least.
--
-- A count is as of this statement (no cache): the published janitor gauges
-- count only the due queue per command, not statuses. Run with JIT off
-- (store.QueryHot). BenchmarkJobCounts (internal/e2e) measures it.
WITH unowned AS MATERIALIZED (
    -- Newest first by active_jobs' primary key, each job looked up by its
    -- own (OFFSET 0 keeps the lookup per row: a join would read jobs'
    -- whole key range to merge).
    SELECT j.status
    FROM active_jobs a
    CROSS JOIN LATERAL (
        SELECT j.status FROM jobs j
        WHERE j.id = a.job_id AND {{job_filters}}
        OFFSET 0) j
    WHERE a.agent_name IS NULL
      AND @agent::text = ''
      AND a.job_id >= coalesce(@since_id::text, '') AND a.job_id < coalesce(@until_id::text, '~')
    ORDER BY a.job_id DESC
    LIMIT @cap + 1
), held AS MATERIALIZED (
    SELECT j.status
    FROM active_jobs a
    JOIN jobs j ON j.id = a.job_id
    WHERE a.agent_name IS NOT NULL
      AND (@agent::text = '' OR a.agent_name = @agent)
      AND {{job_filters}}
), ended (status, n) AS MATERIALIZED (
    -- Each status by name, so the planner reads its own range of
    -- jobs_indexed_status_id, newest first, and stops at the cap.
    SELECT 'succeeded', count(*)::int FROM (
        SELECT 1 FROM jobs j
        WHERE j.indexed_status = 'succeeded' AND @agent::text = '' AND {{job_filters}}
        ORDER BY j.indexed_status DESC, j.id DESC
        LIMIT @cap + 1) x
    UNION ALL
    SELECT 'failed', count(*)::int FROM (
        SELECT 1 FROM jobs j
        WHERE j.indexed_status = 'failed' AND @agent::text = '' AND {{job_filters}}
        ORDER BY j.indexed_status DESC, j.id DESC
        LIMIT @cap + 1) x
    UNION ALL
    SELECT 'canceled', count(*)::int FROM (
        SELECT 1 FROM jobs j
        WHERE j.indexed_status = 'canceled' AND @agent::text = '' AND {{job_filters}}
        ORDER BY j.indexed_status DESC, j.id DESC
        LIMIT @cap + 1) x
)
SELECT status, sum(n)::int, bool_or(at_least)
FROM (
    SELECT status, count(*) AS n, (SELECT count(*) FROM unowned) > @cap AS at_least FROM unowned GROUP BY status
    UNION ALL
    SELECT status, count(*), false FROM held GROUP BY status
    UNION ALL
    SELECT status, n, n > @cap FROM ended
) c
GROUP BY status;
