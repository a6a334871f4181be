-- The janitor's final write, fenced like an agent's Finish by (job_id, lease)
-- and the status it decided on: the terminal status, its event (under lease
-- + 1, so it outranks every write of the old holder), the removal of the
-- active row and, when $9, a queued Cleanup — all in one statement, so the
-- Cleanup is only ever due once the terminal status is committed.
-- $1 job, $2 lease, $3 expected status, $4 final status, $5 error,
-- $6 error class, $7/$8 acting agent, $9 enqueue cleanup, $10 event kind.
WITH t AS (
    SELECT a.job_id
    FROM active_jobs a JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = $1 AND a.lease = $2 AND j.status = $3
), j AS (
    UPDATE jobs
    SET status = $4, error = $5, error_class = $6,
        finished_at = now(), updated_at = now()
    WHERE id IN (SELECT job_id FROM t)
    RETURNING id, plugin, command, context, attempt
), d AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM j)
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, $10, $7, $8, $2 + 1, $5 FROM j
), c AS (
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason)
    SELECT id, plugin, command, context, attempt, $5 FROM j WHERE $9
    ON CONFLICT (job_id) DO NOTHING
)
SELECT count(*) FROM j;
