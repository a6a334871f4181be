-- A Cleanup succeeded (or was not needed): remove it from the queue, fenced by
-- the claim, and record the attempt. $1 job, $2 worker, $3 attempts,
-- $4 generation, $5 event kind, $6 message.
WITH d AS (
    DELETE FROM cleanups WHERE job_id = $1 AND claimed_by = $2 AND attempts = $3
    RETURNING job_id
)
INSERT INTO job_events (job_id, kind, agent, generation, message)
SELECT job_id, $5, $2, $4, $6 FROM d;
