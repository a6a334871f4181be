-- The end of attempts whose plan is final, with no retry and no Cleanup —
-- every success, and any end whose plugin leaves nothing to clean up — for
-- one actor (@agent, @generation): the agent's group-commit batches, and
-- store.EndAttempt with one row (the janitor, in its transaction). It stores
-- exactly what attempt_end.sql stores for such a plan, with the statement
-- nodes such a plan uses (PostgreSQL runs every node whether it writes or
-- not). Each row is fenced by its own (job_id, lease), by its holder's
-- generation when it is the holder's own end (see log_append.sql), and by its expected
-- status when it has one (the janitor decided on the status it read under
-- lock): a row whose fence no longer holds writes nothing and is missing
-- from the answer, while the others land. Active rows are locked in job_id
-- order, like every other multi-row statement, so batches never deadlock
-- with each other. Run with the generic plan (store.queryGeneric) by the
-- batches; rows are matched through ANY (ARRAY(...)) so that plan reads
-- jobs and active_jobs by primary key.
WITH r AS (
    SELECT *
    FROM unnest(@jobs::text[], @leases::bigint[], @holders::text[], @expects::text[], @statuses::text[], @results::text[],
                @errors::text[], @error_classes::text[], @event_kinds::text[],
                @event_leases::bigint[], @messages::text[])
         AS r(job_id, lease, holder, expect, status, result, error, error_class, event_kind, event_lease, message)
), f AS (
    SELECT a.job_id
    FROM active_jobs a JOIN r ON r.job_id = a.job_id AND r.lease = a.lease
        AND (r.holder = '' OR a.agent_generation = r.holder)
    ORDER BY a.job_id
    FOR UPDATE OF a
), j AS (
    UPDATE jobs
    SET status = r.status, result = r.result::jsonb, error = r.error, error_class = r.error_class,
        finished_at = now(), updated_at = now(), last_lease = r.lease + 1,
        expires_at = tether_expiry(r.status, now(), jobs.ttl_succeeded, jobs.ttl_failed)
    FROM r
    WHERE jobs.id = ANY (ARRAY(SELECT job_id FROM f)) AND jobs.id = r.job_id
      AND (r.expect = '' OR jobs.status = r.expect)
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
