-- Fenced accepted -> running for jobs of one holder: one
-- job (store.MarkRunning) or a group-commit batch, each row fenced by its own
-- (job_id, lease) and, when given, its holder's generation (see
-- log_append.sql). The answer has one row per requested job: 'running' when
-- it was moved from accepted, '' when its lease no longer holds, or the
-- status that stopped the change (canceling). Active rows are locked in
-- job_id order. Run with the generic plan (store.queryGeneric): rows are
-- matched through ANY (ARRAY(...)) so that plan reads jobs by primary key.
WITH r AS (
    SELECT * FROM unnest(@jobs::text[], @leases::bigint[], @generations::text[], @messages::text[])
        AS r(job_id, lease, generation, message)
), f AS (
    SELECT a.job_id, a.lease
    FROM active_jobs a JOIN r ON r.job_id = a.job_id AND r.lease = a.lease
        AND (r.generation = '' OR a.agent_generation = r.generation)
    ORDER BY a.job_id
    FOR UPDATE OF a
), j AS (
    -- The running event is this row's running_* columns (schema v13).
    UPDATE jobs
    SET status = 'running', started_at = coalesce(started_at, now()), attempt_started_at = now(),
        updated_at = now(),
        running_event_id = nextval('job_events_id_seq'), running_at = now(), running_message = r.message
    FROM r
    WHERE jobs.id = ANY (ARRAY(SELECT job_id FROM f)) AND jobs.id = r.job_id AND jobs.status = 'accepted'
    RETURNING jobs.id
)
SELECT r.job_id,
       CASE WHEN j.id IS NOT NULL THEN 'running'
            WHEN f.job_id IS NULL THEN ''
            ELSE (SELECT s.status FROM jobs s WHERE s.id = r.job_id) END
FROM r
LEFT JOIN f ON f.job_id = r.job_id
LEFT JOIN j ON j.id = r.job_id;
