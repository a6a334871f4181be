-- Retention: delete up to $1 terminal jobs whose expires_at (finished_at +
-- the ttl stamped for their status) has passed. The partial index on
-- expires_at finds them without a scan; SKIP LOCKED keeps each batch short
-- and lets janitors share the work. Events, logs and requeue keys go with
-- the job (ON DELETE CASCADE). A job that is not terminal is never touched,
-- whatever its expires_at, and neither is one whose Cleanup is still queued:
-- deleting it would forget remote work nobody has stopped yet.
WITH doomed AS (
    SELECT id
    FROM jobs
    WHERE expires_at IS NOT NULL AND expires_at < now()
      AND status IN ('succeeded', 'failed', 'canceled')
      AND NOT EXISTS (SELECT 1 FROM cleanups c WHERE c.job_id = jobs.id)
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs WHERE id IN (SELECT id FROM doomed);
