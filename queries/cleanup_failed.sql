-- A Cleanup failed: keep it, due again after $5 seconds, and record the
-- attempt. Fenced by the claim. $1 job, $2 worker, $3 attempts, $4 generation,
-- $6 error.
WITH u AS (
    UPDATE cleanups
    SET last_error = $6, next_at = now() + $5::float8 * interval '1 second',
        claimed_by = NULL, claimed_until = NULL
    WHERE job_id = $1 AND claimed_by = $2 AND attempts = $3
    RETURNING job_id, attempts
)
INSERT INTO job_events (job_id, kind, agent, generation, message)
SELECT job_id, 'cleanup_failed', $2, $4, 'attempt ' || attempts || ': ' || $6 FROM u;
