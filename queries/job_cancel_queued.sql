-- A job no agent has touched is canceled at once; deleting its active row
-- fences out any later claim.
WITH d AS (
    DELETE FROM active_jobs WHERE job_id = $1
), j AS (
    UPDATE jobs SET status = 'canceled', error = $2, finished_at = now(), updated_at = now()
    WHERE id = $1
    RETURNING id
)
INSERT INTO job_events (job_id, kind, message)
SELECT id, 'canceled', $2 FROM j;
