-- attempt_end_final.sql for many jobs of one holder (@agent, @generation) at
-- once: the agent's hot path (final, no retry, no Cleanup, no expected
-- status) batched over a few milliseconds. Each row is fenced by its own
-- (job_id, lease) exactly as the single statement: a row whose lease no
-- longer holds writes nothing and is missing from the answer, while the
-- others land. Active rows are locked in job_id order, like every other
-- multi-row statement, so batches never deadlock with each other. Run with
-- the generic plan (store.queryGeneric); rows are matched through
-- ANY (ARRAY(...)) so that plan reads jobs and active_jobs by primary key.
WITH r AS (
    SELECT *
    FROM unnest(@jobs::text[], @leases::bigint[], @statuses::text[], @results::text[],
                @errors::text[], @error_classes::text[], @event_kinds::text[],
                @event_leases::bigint[], @messages::text[])
         AS r(job_id, lease, status, result, error, error_class, event_kind, event_lease, message)
), f AS (
    SELECT a.job_id
    FROM active_jobs a JOIN r ON r.job_id = a.job_id AND r.lease = a.lease
    ORDER BY a.job_id
    FOR UPDATE OF a
), j AS (
    UPDATE jobs
    SET status = r.status, result = r.result::jsonb, error = r.error, error_class = r.error_class,
        finished_at = now(), updated_at = now(), last_lease = r.lease + 1,
        expires_at = tether_expiry(r.status, now(), jobs.ttl_succeeded, jobs.ttl_failed)
    FROM r
    WHERE jobs.id = ANY (ARRAY(SELECT job_id FROM f)) AND jobs.id = r.job_id
    RETURNING jobs.id
), gone AS (
    DELETE FROM active_jobs WHERE job_id = ANY (ARRAY(SELECT id FROM j))
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT r.job_id, r.event_kind, @agent::text, @generation::text, r.event_lease, r.message
    FROM r JOIN j ON j.id = r.job_id
), n AS (
    -- Wakes the followers of the jobs that ended (logs and events).
    SELECT pg_notify('tether_job_end', id) FROM j
    WHERE EXISTS (SELECT 1 FROM job_followers f WHERE f.job_id = j.id)
)
SELECT j.id FROM j, (SELECT count(*) FROM n) x;
