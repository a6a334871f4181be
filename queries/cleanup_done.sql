-- A Cleanup succeeded (or was not needed): remove it from the queue, fenced by
-- the claim, and record the attempt. A retry that waited for this Cleanup
-- becomes claimable at its retry_at (or at once). $1 job, $2 worker,
-- $3 attempts, $4 generation, $5 event kind, $6 message.
WITH d AS (
    DELETE FROM cleanups WHERE job_id = $1 AND claimed_by = $2 AND attempts = $3
    RETURNING job_id, retry_at
), g AS (
    UPDATE active_jobs a
    SET run_after = greatest(d.retry_at, now())
    FROM d
    WHERE a.job_id = d.job_id AND a.agent_name IS NULL AND a.run_after = 'infinity'
    RETURNING a.command
), n AS (
    SELECT pg_notify('tether_jobs', command) FROM g
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, message)
    SELECT job_id, $5, $2, $4, $6 FROM d
)
SELECT count(*) FROM n;
