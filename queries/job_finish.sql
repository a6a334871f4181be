-- Fenced final write of one attempt, all in one statement. Zero rows = the
-- lease was lost.
--
-- A failed attempt of class retriable with attempt <= max_retry is retried:
-- the job goes back to queued with attempt + 1, its active row becomes
-- claimable again (holder cleared, lease + 1, handle cleared) at now() + the
-- backoff, and a retry_scheduled event says when. The backoff is
-- min(retry_backoff * 2^(attempt-1), retry_backoff_max) scaled into
-- [half, all] of itself by $10 (jitter in [0, 1)). error and error_class are
-- kept for the record. Anything else is final: status, result, error, the
-- final event and the removal of the active row.
--
-- $11: the caller runs the plugin's Cleanup once this commits. A retry then
-- waits for it (run_after = 'infinity', lifted by cleanup_done or
-- cleanup_finish) and a cleanups row is queued, due after $12 seconds, as the
-- fallback should this agent die before its Cleanup ends.
--
-- $1 job, $2 lease, $3 status, $4 result, $5 error, $6 error class,
-- $7/$8 holder, $9 final event message.
-- Returns rows written, whether it was a retry, the job's attempt now, and
-- when the retry runs (NULL when it waits for Cleanup).
WITH fence AS (
    SELECT job_id FROM active_jobs WHERE job_id = $1 AND lease = $2 FOR UPDATE
), cur AS (
    SELECT j.id, j.attempt,
           ($3 = 'failed' AND $6 IS NOT DISTINCT FROM 'retriable' AND j.attempt <= j.max_retry) AS retry,
           least(j.retry_backoff * power(2, least(j.attempt - 1, 30)), j.retry_backoff_max)
               * (0.5 + 0.5 * $10::float8) AS wait
    FROM jobs j JOIN fence ON fence.job_id = j.id
), fin AS (
    UPDATE jobs
    SET status = $3, result = $4, error = $5, error_class = $6,
        finished_at = now(), updated_at = now()
    WHERE id IN (SELECT id FROM cur WHERE NOT retry)
    RETURNING id
), rj AS (
    UPDATE jobs
    SET status = 'queued', attempt = jobs.attempt + 1, result = NULL, error = $5, error_class = $6,
        attempt_started_at = NULL, finished_at = NULL, updated_at = now()
    FROM cur
    WHERE jobs.id = cur.id AND cur.retry
    RETURNING jobs.id, jobs.attempt, jobs.command, cur.wait
), ra AS (
    UPDATE active_jobs a
    SET agent_name = NULL, agent_generation = NULL, lease = a.lease + 1, handle = NULL,
        last_heartbeat = NULL, claimed_at = NULL, released_at = NULL, release_reason = NULL,
        run_after = CASE WHEN $11::boolean THEN 'infinity' ELSE now() + rj.wait END
    FROM rj
    WHERE a.job_id = rj.id
    RETURNING a.job_id, a.lease, a.run_after
), c AS (
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason, next_at, retry_at)
    SELECT j.id, j.plugin, j.command, j.context, rj.attempt - 1, $5,
           now() + $12::float8 * interval '1 second', now() + rj.wait
    FROM rj JOIN jobs j ON j.id = rj.id
    WHERE $11::boolean
    ON CONFLICT (job_id) DO UPDATE SET retry_at = excluded.retry_at
), d AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM fin)
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, $3, $7, $8, $2, $9 FROM fin
    UNION ALL
    SELECT rj.id, 'retry_scheduled', $7, $8, ra.lease,
           'attempt ' || rj.attempt ||
           CASE WHEN $11::boolean THEN ' after Cleanup, not before ' || to_char((now() + rj.wait) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                ELSE ' at ' || to_char(ra.run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
           || ': ' || coalesce($5, '')
    FROM rj JOIN ra ON ra.job_id = rj.id
), n AS (
    SELECT pg_notify('tether_jobs', command) FROM rj
)
SELECT (SELECT count(*) FROM fin) + (SELECT count(*) FROM rj),
       EXISTS (SELECT 1 FROM rj),
       coalesce((SELECT attempt FROM rj), (SELECT attempt FROM cur), 0),
       (SELECT run_after FROM ra WHERE isfinite(run_after))
FROM (SELECT count(*) FROM n) x;
