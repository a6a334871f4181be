-- Retention: delete up to $1 terminal jobs whose expires_at (finished_at +
-- the ttl stamped for their status) has passed, with their events and log
-- chunks (no foreign key cascades to those since schema v12: they go here,
-- by their (job_id, id) keys); requeue keys and followers go by ON DELETE
-- CASCADE. The partial index on expires_at finds the jobs without a scan;
-- SKIP LOCKED keeps each batch short and lets janitors share the work. A
-- job that is not terminal is never touched, whatever its expires_at, and
-- neither is one whose Cleanup is still queued: deleting it would forget
-- remote work nobody has stopped yet. Returns how many jobs it deleted.
WITH doomed AS (
    SELECT id
    FROM jobs
    WHERE expires_at IS NOT NULL AND expires_at < now()
      AND status IN ('succeeded', 'failed', 'canceled')
      AND NOT EXISTS (SELECT 1 FROM cleanups c WHERE c.job_id = jobs.id)
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING id
), events AS (
    DELETE FROM job_events WHERE job_id IN (SELECT id FROM gone)
), logs AS (
    DELETE FROM job_logs WHERE job_id IN (SELECT id FROM gone)
)
SELECT count(*)::int FROM gone;
