-- Fenced final write of an outcome that cannot be retried (succeeded,
-- canceled, or a failure that is not retriable): status, result, error, the
-- final event and removal of the active row, all in one statement. Zero rows =
-- the lease was lost. Retriable failures go through job_finish.sql, which
-- decides on a retry; keeping the common path apart keeps it as cheap as it
-- was before retries existed (measured with make bench).
WITH fence AS (
    SELECT job_id FROM active_jobs WHERE job_id = $1 AND lease = $2 FOR UPDATE
), j AS (
    UPDATE jobs
    SET status = $3, result = $4, error = $5, error_class = $6,
        finished_at = now(), updated_at = now()
    WHERE id IN (SELECT job_id FROM fence)
    RETURNING id
), d AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM j)
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, $3, $7, $8, $2, $9 FROM j
)
SELECT count(*) FROM j;
