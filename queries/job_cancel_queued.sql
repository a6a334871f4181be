-- A job no agent holds is canceled at once; deleting its active row fences
-- out any later claim, and jobs.last_lease keeps the lease above every one
-- handed out so far (an operator requeue starts above it).
WITH d AS (
    DELETE FROM active_jobs WHERE job_id = $1
    RETURNING job_id, lease
), j AS (
    UPDATE jobs SET status = 'canceled', error = $2, finished_at = now(), updated_at = now(),
        expires_at = tether_expiry('canceled', now(), ttl_succeeded, ttl_failed),
        last_lease = greatest(jobs.last_lease, (SELECT lease FROM d) + 1)
    WHERE id = $1
    RETURNING id
), n AS (
    -- Wakes the job's followers: it ended.
    SELECT pg_notify('tether_job_end', id) FROM j
    WHERE EXISTS (SELECT 1 FROM job_followers f WHERE f.job_id = j.id)
)
INSERT INTO job_events (job_id, kind, message)
SELECT id, 'canceled', $2 FROM j WHERE (SELECT count(*) FROM n) >= 0;
