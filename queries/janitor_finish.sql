-- The janitor's final write, fenced like an agent's Finish by (job_id, lease)
-- and the status it decided on: the terminal status, its event (under lease
-- + 1, so it outranks every write of the old holder), the removal of the
-- active row and, when $9, a queued Cleanup — all in one statement, so the
-- Cleanup is only ever due once the terminal status is committed.
--
-- When $11 allows it, a failed job of class retriable with attempt <=
-- max_retry is retried instead, exactly like job_finish: queued, attempt + 1,
-- a claimable active row (lease + 1, handle cleared) and a retry_scheduled
-- event. With $9 the retry waits for the Cleanup (run_after = 'infinity'
-- until cleanup_done lifts it), so the next attempt never runs beside the
-- remote work of the last one.
--
-- $1 job, $2 lease, $3 expected status, $4 final status, $5 error,
-- $6 error class, $7/$8 acting agent, $9 enqueue cleanup, $10 event kind,
-- $11 retry allowed, $12 jitter in [0, 1).
WITH t AS (
    SELECT a.job_id, j.attempt,
           ($11::boolean AND $4 = 'failed' AND $6 IS NOT DISTINCT FROM 'retriable' AND j.attempt <= j.max_retry) AS retry,
           least(j.retry_backoff * power(2, least(j.attempt - 1, 30)), j.retry_backoff_max)
               * (0.5 + 0.5 * $12::float8) AS wait
    FROM active_jobs a JOIN jobs j ON j.id = a.job_id
    WHERE a.job_id = $1 AND a.lease = $2 AND j.status = $3
), j AS (
    UPDATE jobs
    SET status = $4, error = $5, error_class = $6,
        finished_at = now(), updated_at = now()
    WHERE id IN (SELECT job_id FROM t WHERE NOT retry)
    RETURNING id, plugin, command, context, attempt
), rj AS (
    UPDATE jobs
    SET status = 'queued', attempt = jobs.attempt + 1, result = NULL, error = $5, error_class = $6,
        attempt_started_at = NULL, finished_at = NULL, updated_at = now()
    FROM t
    WHERE jobs.id = t.job_id AND t.retry
    RETURNING jobs.id, jobs.plugin, jobs.command, jobs.context, jobs.attempt, t.wait
), ra AS (
    UPDATE active_jobs a
    SET agent_name = NULL, agent_generation = NULL, lease = a.lease + 1, handle = NULL,
        last_heartbeat = NULL, claimed_at = NULL, released_at = NULL, release_reason = NULL,
        run_after = CASE WHEN $9::boolean THEN 'infinity' ELSE now() + rj.wait END
    FROM rj
    WHERE a.job_id = rj.id
    RETURNING a.job_id, a.lease, a.run_after
), d AS (
    DELETE FROM active_jobs WHERE job_id IN (SELECT id FROM j)
), e AS (
    INSERT INTO job_events (job_id, kind, agent, generation, lease, message)
    SELECT id, $10, $7, $8, $2 + 1, $5 FROM j
    UNION ALL
    SELECT rj.id, 'retry_scheduled', $7, $8, ra.lease,
           'attempt ' || rj.attempt ||
           CASE WHEN $9::boolean THEN ' after Cleanup, not before ' || to_char((now() + rj.wait) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                ELSE ' at ' || to_char(ra.run_after AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
           || ': ' || coalesce($5, '')
    FROM rj JOIN ra ON ra.job_id = rj.id
), c AS (
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason)
    SELECT id, plugin, command, context, attempt, $5 FROM j WHERE $9
    ON CONFLICT (job_id) DO NOTHING
), cr AS (
    INSERT INTO cleanups (job_id, plugin, command, context, attempt, reason, retry_at)
    SELECT id, plugin, command, context, attempt - 1, $5, now() + wait FROM rj WHERE $9
    ON CONFLICT (job_id) DO UPDATE SET retry_at = excluded.retry_at
), n AS (
    SELECT pg_notify('tether_jobs', command) FROM rj
)
SELECT (SELECT count(*) FROM j) + (SELECT count(*) FROM rj) FROM (SELECT count(*) FROM n) x;
