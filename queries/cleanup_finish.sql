-- The agent's own Cleanup after a retried attempt succeeded: drop the
-- fallback row job_finish queued (unless a worker has claimed it) and let the
-- retry run at its retry_at (or at once). $1 job.
WITH d AS (
    DELETE FROM cleanups WHERE job_id = $1 AND (claimed_until IS NULL OR claimed_until < now())
    RETURNING job_id, retry_at
), g AS (
    UPDATE active_jobs a
    SET run_after = greatest(d.retry_at, now())
    FROM d
    WHERE a.job_id = d.job_id AND a.agent_name IS NULL AND a.run_after = 'infinity'
    RETURNING a.command
)
SELECT count(*) FROM (SELECT pg_notify('tether_jobs', command) FROM g) n;
