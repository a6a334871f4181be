-- Fenced accepted -> running, just before the plugin is called. The attempt's
-- active_timeout counts from attempt_started_at.
WITH fence AS (
    SELECT job_id FROM active_jobs WHERE job_id = $1 AND lease = $2 FOR UPDATE
), j AS (
    UPDATE jobs
    SET status = 'running', started_at = coalesce(started_at, now()), attempt_started_at = now(),
        updated_at = now()
    WHERE id IN (SELECT job_id FROM fence) AND status = 'accepted'
    RETURNING id
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, 'running', $3, $4, $2, $5 FROM j
)
SELECT count(*) FROM j;
