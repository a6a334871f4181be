-- Safety net: a retry waiting for a Cleanup that is no longer queued (it
-- raced with an operator requeue, say) becomes claimable. Bounded by $1 rows;
-- uses the claimable index (agent_name IS NULL, run_after = 'infinity').
WITH g AS (
    SELECT a.job_id
    FROM active_jobs a
    WHERE a.agent_name IS NULL AND a.run_after = 'infinity'
      AND NOT EXISTS (SELECT 1 FROM cleanups c WHERE c.job_id = a.job_id)
    ORDER BY a.job_id
    LIMIT $1
    FOR UPDATE OF a SKIP LOCKED
), u AS (
    UPDATE active_jobs a SET run_after = now()
    FROM g WHERE a.job_id = g.job_id
    RETURNING a.command
)
SELECT count(*) FROM (SELECT pg_notify('tether_jobs', command) FROM u) n;
