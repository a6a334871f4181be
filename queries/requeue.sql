-- Operator requeue of a failed or canceled job (the caller checked and holds
-- its row lock): back to queued with attempt + 1 and a fresh claimable active
-- row, an event recording who, why and the key, and a wake-up for agents. A
-- Cleanup still queued for the job holds the new attempt until it is done
-- (run_after = 'infinity'; cleanup_done lifts it).
-- $1 job, $2 event message.
WITH j AS (
    UPDATE jobs
    SET status = 'queued', attempt = attempt + 1, result = NULL,
        attempt_started_at = NULL, finished_at = NULL, expires_at = NULL, updated_at = now()
    WHERE id = $1 AND status IN ('failed', 'canceled')
    RETURNING id, command, plugin, pending_timeout, last_lease
), a AS (
    -- Above every lease the job ever had: a holder of an earlier attempt is
    -- fenced out for good.
    INSERT INTO active_jobs (job_id, command, plugin, pending_timeout, lease, run_after)
    SELECT id, command, plugin, pending_timeout, last_lease + 1,
           CASE WHEN EXISTS (SELECT 1 FROM cleanups c WHERE c.job_id = j.id) THEN 'infinity'::timestamptz ELSE now() END
    FROM j
), e AS (
    INSERT INTO job_events (job_id, kind, message)
    SELECT id, 'requeued', $2 FROM j
)
SELECT count(*) FROM j, LATERAL (SELECT pg_notify('tether_jobs', j.command)) n;
