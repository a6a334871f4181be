-- Claim up to $3 due Cleanups of the plugins this agent has loaded ($2) for
-- $4 seconds. A claim that lapses (the worker died) makes the row due again.
-- Each claim counts as an attempt; (job_id, claimed_by, attempts) fences the
-- worker's answer.
WITH picked AS (
    SELECT job_id
    FROM cleanups
    WHERE next_at <= now() AND plugin = ANY($2::text[])
      AND (claimed_until IS NULL OR claimed_until < now())
    ORDER BY next_at, job_id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE cleanups c
SET claimed_by = $1, claimed_until = now() + $4::float8 * interval '1 second', attempts = c.attempts + 1
FROM picked
WHERE c.job_id = picked.job_id
RETURNING c.job_id, c.plugin, c.command, c.context, c.attempt, c.attempts, c.handle;
